"""The tests' own layout (issue 28): no test module imports another test module or a conftest
(fixtures come from conftest files through pytest, shared helpers from tests/support); a helper
module beside some tests serves its own directory only; tests/support stands on its own; and no
fixture name is defined in two files."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.imports import imports_of

TESTS = Path(__file__).resolve().parent
SUPPORT = "tests.support"
# A fixture name defined in more than one file, on purpose: name -> why the definitions differ.
INTENDED_DUPLICATE_FIXTURES: dict[str, str] = {}


def _module_name(tests: Path, path: Path) -> str:
    """tests/lake/test_cdc.py is tests.lake.test_cdc; tests/support/__init__.py is tests.support."""
    parts = (tests.name, *path.relative_to(tests).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_test_or_conftest(dotted: str) -> bool:
    return any(part.startswith("test_") or part == "conftest" for part in dotted.split(".")[1:])


def _within(dotted: str, package: str) -> bool:
    return dotted == package or dotted.startswith(package + ".")


def import_offences(tests: Path) -> list[str]:
    """`file:line imports name (why)` for every import of a tests.* module that breaks the layout."""
    root = tests.name
    offences = []
    for path in sorted(tests.rglob("*.py")):
        module = _module_name(tests, path)
        is_package = path.name == "__init__.py"
        package = module if is_package else module.rpartition(".")[0]
        in_support = _within(module, f"{root}.support")
        for dotted, line in imports_of(ast.parse(path.read_text()), module, is_package):
            if not _within(dotted, root) or dotted == root:
                continue
            where = f"{path.relative_to(tests.parent)}:{line} imports {dotted}"
            if _is_test_or_conftest(dotted):
                offences.append(f"{where} (a test module or a conftest: fixtures come from conftest files, "
                                f"helpers from {root}/support)")
            elif in_support and not _within(dotted, f"{root}.support"):
                offences.append(f"{where} ({root}/support imports nothing from the test directories)")
            elif not _within(dotted, f"{root}.support") and not _within(dotted, package):
                offences.append(f"{where} (a helper of another directory: move it to {root}/support)")
    return offences


def _fixture_names(tree: ast.Module) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if ast.unparse(target) not in ("pytest.fixture", "fixture"):
                continue
            renamed = [k.value.value for k in (call.keywords if call else ()) if k.arg == "name"
                       and isinstance(k.value, ast.Constant)]
            names.append(renamed[0] if renamed else node.name)
    return names


def duplicate_fixtures(tests: Path) -> dict[str, list[str]]:
    """Fixture name -> the conftest and test files defining it, for names defined in more than one."""
    defined: dict[str, list[str]] = defaultdict(list)
    for path in sorted(tests.rglob("*.py")):
        if path.name == "conftest.py" or path.name.startswith("test_"):
            for name in _fixture_names(ast.parse(path.read_text())):
                defined[name].append(str(path.relative_to(tests.parent)))
    return {name: files for name, files in defined.items() if len(files) > 1}


def test_no_test_module_imports_another_nor_a_conftest_nor_another_directorys_helper():
    offences = import_offences(TESTS)
    assert not offences, "\n".join(offences)


def test_no_fixture_is_defined_in_two_files():
    duplicates = {name: files for name, files in duplicate_fixtures(TESTS).items()
                  if name not in INTENDED_DUPLICATE_FIXTURES}
    assert not duplicates, "\n".join(f"fixture {name!r} defined in {', '.join(files)}: give each its own name, "
                                     f"or one definition in a conftest" for name, files in duplicates.items())


def test_the_layout_checks_name_each_offender(tmp_path):
    tests = tmp_path / "tests"
    for directory in ("lake", "cli", "support"):
        (tests / directory).mkdir(parents=True)
        (tests / directory / "__init__.py").write_text("")
    (tests / "__init__.py").write_text("")
    (tests / "conftest.py").write_text("import pytest\n\n@pytest.fixture\ndef root(tmp_path):\n    return tmp_path\n")
    (tests / "support" / "waits.py").write_text("from tests.lake.model import Rec\n")
    (tests / "lake" / "model.py").write_text("from tests.support.waits import wait_for\n")
    (tests / "lake" / "conftest.py").write_text("import pytest\n\n@pytest.fixture(name='root')\ndef lake_root():\n"
                                                "    return 1\n")
    (tests / "lake" / "test_a.py").write_text("from .model import Rec\nfrom tests.support import waits\n"
                                              "from .conftest import lake_root\n")
    (tests / "cli" / "test_b.py").write_text("import pytest\nfrom ..lake import model\n\n"
                                             "def test_b():\n    from tests.lake.test_a import Rec\n\n"
                                             "@pytest.fixture\ndef root():\n    return 2\n")
    assert import_offences(tests) == [
        "tests/cli/test_b.py:2 imports tests.lake.model (a helper of another directory: move it to tests/support)",
        "tests/cli/test_b.py:5 imports tests.lake.test_a.Rec (a test module or a conftest: fixtures come from "
        "conftest files, helpers from tests/support)",
        "tests/lake/test_a.py:3 imports tests.lake.conftest.lake_root (a test module or a conftest: fixtures come "
        "from conftest files, helpers from tests/support)",
        "tests/support/waits.py:1 imports tests.lake.model.Rec (tests/support imports nothing from the test "
        "directories)",
    ]
    assert duplicate_fixtures(tests) == {"root": ["tests/cli/test_b.py", "tests/conftest.py", "tests/lake/conftest.py"]}
