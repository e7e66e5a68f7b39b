"""The dependency rules of docs/DESIGN.md (pyproject.toml's import-linter contracts), checked on every test run,
and no import cycle anywhere in lib/."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.imports import imports_of

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 29 kept, 0 broken" in result.stdout


# ------------------------------------------------------------------------------------------ cycles

def _module_name(lib: Path, path: Path) -> str:
    """lib/ is the package `topiclake`: lib/lake/runs/ingest.py is topiclake.lake.runs.ingest."""
    parts = ("topiclake", *path.relative_to(lib).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(lib: Path) -> dict[str, dict[str, int]]:
    """module -> {topiclake module it imports: the line of the first such import}."""
    files = {_module_name(lib, path): path for path in sorted(lib.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges = graph.setdefault(module, {})
        for name, line in imports_of(ast.parse(path.read_text()), module, path.name == "__init__.py"):
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


# ------------------------------------------------------------------------------ the design names them

def _layer_modules(layer: str) -> list[str]:
    """'a | b', 'a : b' and '(a)' (optional) name modules; each is one name."""
    return [name for name in re.split(r"[|:()\s]+", layer) if name]


def test_every_import_linter_layer_is_named_in_design():
    """A reader of docs/DESIGN.md meets every layer the contracts hold, and every package they
    cover: a layer added to pyproject.toml without a word in the design fails here."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    design = (REPO / "docs" / "DESIGN.md").read_text()
    named = set(re.findall(r"`([^`]+)`", design)) | set(re.findall(r"^\|((?:\\\||[^|])+)\|", design, re.M))  # a row's first cell
    words = {word for text in named for word in re.split(r"[^\w]+", text) if word}
    layers = [c for c in contracts if c["type"] == "layers"]
    assert layers, "no layers contract found in pyproject.toml"
    missing = sorted({f"{container}: {module}" for c in layers for container in c.get("containers", [""])
                      for layer in c["layers"] for module in _layer_modules(layer)
                      if module.rsplit(".", 1)[-1] not in words}
                     | {container for c in layers for container in c.get("containers", [])
                        if container.rsplit(".", 1)[-1] not in words})
    assert not missing, "layers docs/DESIGN.md does not name:\n" + "\n".join(missing)


# ------------------------------------------------------------------------------------ file sizes

MAX_LINES = 600
GENERATED = {".json", ".csv", ".tsv", ".lock", ".svg"}  # data and exported dashboards, not prose or code


def test_no_file_over_600_lines():
    """A file that long does several things: split it by concern (code) or by reader (docs)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    too_long = []
    for name in filter(None, listed):
        path = REPO / name
        if Path(name).suffix in GENERATED or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:4096]:  # binary
            continue
        lines = data.count(b"\n")
        if lines > MAX_LINES:
            too_long.append(f"{name}: {lines} lines")
    assert not too_long, f"files over {MAX_LINES} lines:\n" + "\n".join(too_long)
