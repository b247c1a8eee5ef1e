"""The package's layout holds (docs/explanation/architecture.md): no module over 600 lines, no
class over 300, and no import circle between its modules, counting the imports made inside
functions too (an import moved into a function still ties the two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "django_sqlq"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package but its migrations."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.relative_to(PACKAGE).parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The package's modules ``tree`` imports, anywhere in it but under ``if TYPE_CHECKING:``."""
    names: set[str] = set()

    def nearest(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in map(nearest, names) if m is not None}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of more than one module that each reach all the others."""

    def reach(node: str) -> set[str]:
        seen: set[str] = set()
        todo = [node]
        while todo:
            for other in graph.get(todo.pop(), set()) - seen:
                seen.add(other)
                todo.append(other)
        return seen

    reached = {node: reach(node) for node in graph}
    groups = {
        tuple(sorted({node} | {o for o in reached[node] if node in reached[o]})) for node in graph
    }
    return sorted(list(group) for group in groups if len(group) > 1)


def test_no_module_and_no_class_is_too_long() -> None:
    too_long = []
    for name, path in sorted(modules().items()):
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    too_long.append(f"class {name}.{node.name}: {lines} lines")
    assert too_long == []


def test_no_import_circle() -> None:
    known = modules()
    graph = {
        name: imports(ast.parse(path.read_text()), known) - {name} for name, path in known.items()
    }
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    # The check above cannot pass for want of seeing one.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
