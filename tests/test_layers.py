"""The package's layers (hwopt.LAYERS): every import of a module, at its top or inside a function, points
to its own layer or an earlier one, and no modules import each other in a circle."""

import ast
from pathlib import Path

import pytest

import hwopt

PACKAGE = Path(hwopt.__file__).resolve().parent


def module_name(path: Path) -> str:
    """'hwopt.machine.probe' for hwopt/machine/probe.py; 'hwopt.machine' for its __init__.py."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, name: str, is_package: bool = False) -> set[str]:
    """Every module the code of module `name` imports anywhere, absolute or relative (`from a.b import c`
    counts a.b and a.b.c: c may be a module)."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return found


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}
GRAPH = {module_name(p): (imported(p.read_text(encoding="utf-8"), module_name(p), p.name == "__init__.py")
                          & MODULES) - {module_name(p)}
         for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> int:
    """Index in hwopt.LAYERS of the layer a module belongs to (the package itself: -1, it imports nothing)."""
    if module == "hwopt":
        return -1
    top = module.split(".")[1]
    for i, names in enumerate(hwopt.LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module} is in no layer of hwopt.LAYERS: add its top-level name there")


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer(module)


def test_no_import_points_to_a_later_layer():
    upward = sorted(f"{source} (layer {layer(source) + 1}) imports {target} (layer {layer(target) + 1})"
                    for source, targets in GRAPH.items() for target in targets
                    if layer(target) > layer(source))
    assert not upward, "imports that point to a later layer:\n" + "\n".join(upward)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_modules_import_each_other_in_a_circle():
    assert not circles(GRAPH), f"modules in a circle of imports: {circles(GRAPH)}"


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [["a", "b", "c"]]),
])
def test_the_circle_finder_finds_circles(graph, expected):
    assert circles(graph) == expected


def test_imports_are_found_at_the_top_inside_functions_and_relative():
    source = """
import os
from hwopt.machine import probe
def f():
    from ..cost import costs
    from . import sibling
    import hwopt.formats
"""
    found = imported(source, "hwopt.experiments.x")
    assert {"hwopt.machine", "hwopt.machine.probe", "hwopt.cost.costs", "hwopt.experiments.sibling",
            "hwopt.formats", "os"} <= found
    assert imported("from . import a", "hwopt.kernels", is_package=True) >= {"hwopt.kernels.a"}
    assert layer("hwopt.machine.specs") < layer("hwopt.cost.costs")
