"""The dependency rules of docs/DESIGN.md (pyproject.toml's import-linter contracts), checked on every test run,
and no import cycle anywhere in lib/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 28 kept, 0 broken" in result.stdout


# ------------------------------------------------------------------------------------------ cycles

def _module_name(lib: Path, path: Path) -> str:
    """lib/ is the package `topiclake`: lib/lake/runs/ingest.py is topiclake.lake.runs.ingest."""
    parts = ("topiclake", *path.relative_to(lib).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(imported name, line) of every import statement, at any depth (inside functions too),
    except under `if TYPE_CHECKING:` (its `else:` counts): a name only for annotations never runs."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package, up level - 1 packages
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            found.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)  # a module, or a name in base
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(lib: Path) -> dict[str, dict[str, int]]:
    """module -> {topiclake module it imports: the line of the first such import}."""
    files = {_module_name(lib, path): path for path in sorted(lib.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges = graph.setdefault(module, {})
        for name, line in _imports(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            while name and name not in files:  # `from a.b import Name`: the module a.b
                name = name.rpartition(".")[0]
            if name and name != module:
                edges.setdefault(name, line)
    return graph


def import_cycles(lib: Path) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    graph = import_graph(lib)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def test_no_import_cycle_in_lib():
    """Imports inside functions count: a lazy import is still a dependency (it only runs later)."""
    lib = REPO / "lib"
    cycles = import_cycles(lib)
    graph = import_graph(lib)
    described = ["; ".join(f"{a} -> {b} (l.{graph[a][b]})" for a in cycle for b in cycle if b in graph[a])
                 for cycle in cycles]
    assert not cycles, "import cycles in lib/:\n" + "\n".join(described)


def test_cycle_check_counts_imports_in_functions_not_type_checking(tmp_path):
    lib = tmp_path / "lib"
    (lib / "pkg").mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "pkg" / "__init__.py").write_text("")
    (lib / "pkg" / "a.py").write_text("from . import b\n")
    (lib / "pkg" / "b.py").write_text("def later():\n    from .a import NAME\n")  # a <-> b, lazily
    (lib / "pkg" / "c.py").write_text("from typing import TYPE_CHECKING\n\nfrom .a import NAME\n"
                                      "if TYPE_CHECKING:\n    from .d import Kind\n")
    (lib / "pkg" / "d.py").write_text("from topiclake.pkg import c\n")  # c -> d only for annotations
    assert import_graph(lib)["topiclake.pkg.b"] == {"topiclake.pkg.a": 2}
    assert import_cycles(lib) == [["topiclake.pkg.a", "topiclake.pkg.b"]]
