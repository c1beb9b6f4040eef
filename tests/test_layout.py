"""The layout of src/chorus that docs/architecture.md draws: no import circles, no import
from a lower layer back up, no function over 80 lines."""

import ast
import re
from pathlib import Path

from conftest import REPO

SRC = REPO / "src"
MAX_FUNCTION_LINES = 80


def layers() -> list[set[str]]:
    """docs/architecture.md's layers, top to bottom, as the first names of their modules
    (its first drawing: a layer's name, then its modules `x.py` or packages `x/`)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    drawing = text.split("```\n")[1]
    found: list[set[str]] = []
    for line in drawing.splitlines():
        name, modules, *_ = re.split(r"\s{3,}", line) + [""]
        if name:
            found.append(set())
        found[-1] |= set(re.findall(r"(?:^|[ ,])([a-z_]+)(?:\.py|/)(?=,|$)", modules))
    return found


def modules() -> dict[str, Path]:
    """chorus's modules by dotted name (a package by its __init__)."""
    found = {}
    for path in sorted((SRC / "chorus").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The chorus modules `name` imports anywhere in it (in functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            targets |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    found = set()
    for target in targets:
        while target and target not in known:  # a name imported from a module: the module
            target = target.rpartition(".")[0]
        if target.startswith("chorus") and target != name:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: each a path that comes back to where it started."""
    found, done = [], set()

    def visit(name, path):
        if name in path:
            found.append(path[path.index(name):] + [name])
            return
        if name in done:
            return
        for other in sorted(graph[name]):
            visit(other, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    return found


def layer(name: str, drawn: list[set[str]]) -> int | None:
    first = name.split(".")[1] if "." in name else None
    return next((i for i, members in enumerate(drawn) if first in members), None)


def test_no_import_circles_in_src():
    assert circles(import_graph()) == []


def test_circles_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_every_module_has_a_layer_and_imports_none_above_it():
    graph, drawn = import_graph(), layers()
    assert drawn[2] == {"plan"} and "harness" in drawn[-2]  # the drawing read as drawn
    place = {name: layer(name, drawn) for name in graph}
    unplaced = sorted(name for name in graph if name != "chorus" and place[name] is None)
    upward = sorted(f"{name} -> {other}" for name, others in graph.items() for other in others
                    if None not in (place[name], place[other]) and place[other] < place[name])
    assert (unplaced, upward) == ([], [])


def test_no_function_in_src_is_over_80_lines():
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
