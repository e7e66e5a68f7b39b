"""The import statements of a module as absolute dotted names, for the layout tests (lib/'s
dependency rules, tests/' own)."""

from __future__ import annotations

import ast


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, int]]:
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
