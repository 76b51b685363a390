"""The library's modules import one another one way only: no import circle, counting the
imports made inside functions (a circle there is a circle all the same, hidden)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "include"


def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in (ROOT / "servebench").rglob("*.py"):
        name = ".".join(path.with_suffix("").relative_to(ROOT).parts)
        modules[name.removesuffix(".__init__")] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    edges = _graph()
    assert len(edges) > 50  # the library was found
    assert _circles(edges) == []


def test_a_circle_is_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The canonical definitions of the metrics and what they read: nothing above them (the load
# generator, the runner, the store) may be needed to compute or test a metric.
CANONICAL = "servebench.metrics"
BELOW_METRICS = {"servebench.records"}  # the raw records every metric is computed from


def _reach(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in edges[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_the_canonical_definitions_import_nothing_above_them():
    edges = _graph()
    assert _reach(edges, CANONICAL) <= BELOW_METRICS, _reach(edges, CANONICAL) - BELOW_METRICS
    for module in BELOW_METRICS:  # and what they read imports nothing of servebench at all
        assert edges[module] == set(), (module, edges[module])


def test_reach_follows_imports_of_imports():
    assert _reach({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}, "a") == {"b", "c"}


def test_no_module_shadows_the_standard_library():
    """A script run from inside the package has the package's folder first on sys.path: a
    module named like one of the standard library's (``tokenize``) would be imported in its
    place by the standard library itself."""
    import sys

    shadowing = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "servebench").rglob("*")
                       if path.stem in sys.stdlib_module_names
                       and (path.suffix == ".py" or path.is_dir()))
    assert shadowing == []
