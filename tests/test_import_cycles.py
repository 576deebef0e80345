"""No import cycles in ``livethink``, deferred (function-level) imports included.

The graph is built statically with ``ast`` from every ``import`` / ``from ... import`` statement anywhere in a
module (top level, functions, ``if TYPE_CHECKING`` blocks), with relative imports resolved and
``from pkg import name`` counted as an import of the submodule ``pkg.name`` when that is a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "livethink"


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` of the package (``pkg/__init__.py`` is ``pkg``)."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules that ``module`` imports anywhere in its file."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(target: str) -> None:
        # the longest prefix that is a module of the package (``import a.b.c`` where c is a function: a.b)
        parts = target.split(".")
        while parts:
            name = ".".join(parts)
            if name in modules:
                found.add(name)
                return
            parts.pop()

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = (_resolve_relative(module, is_package, node.level, node.module) if node.level
                      else node.module or "")
            if source.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                add(submodule if submodule in modules else source)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = module_files(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle (as a path ``a → b → … → a``) per strongly connected component with more than one
    module (Tarjan's algorithm, then a breadth-first search inside the component)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)

    result = []
    for component in components:
        members = set(component)
        start = component[0]
        parents: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in parents:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & members):
                    if w not in parents:
                        parents[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start]
        v = parents[start]
        while v != start:
            path.append(v)
            v = parents[v]
        result.append([start, *reversed(path[1:]), start])
    return result


def test_cycle_finder_on_a_hand_made_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}, "g": {"g"} - {"g"}}
    assert sorted(map(tuple, cycles(graph))) == [("a", "b", "c", "a"), ("e", "f", "e")]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_graph_sees_deferred_and_relative_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from livethink.sub.b import g\n    return g\n")
    (pkg / "sub" / "b.py").write_text("import os\nfrom ..sub import a\nfrom .a import f as g\n")
    graph = import_graph(tmp_path)
    assert graph["livethink.sub.a"] == {"livethink.sub.b"}
    assert graph["livethink.sub.b"] == {"livethink.sub.a"}
    assert graph["livethink.sub"] == {"livethink.sub.b"}
    assert cycles(graph) == [["livethink.sub.a", "livethink.sub.b", "livethink.sub.a"]]


def test_livethink_has_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50, "the package was not found"
    found = cycles(graph)
    if found:
        pytest.fail("import cycles (deferred imports included):\n" + "\n".join(" → ".join(c) for c in found))


# ``livethink.serve``'s sub-packages, bottom to top: each may import only the ones before it (and the top-level
# ``config``, ``errors`` and ``protocol`` modules); the package docstrings say the same.
SERVE_LAYERS = ("budget", "engines", "telemetry", "request_path", "api")
SERVE_SHARED = {"livethink.serve", "livethink.serve.config", "livethink.serve.errors", "livethink.serve.protocol"}


def layer_violations(graph: dict[str, set[str]], layers: tuple[str, ...] = SERVE_LAYERS) -> list[str]:
    """``importer → imported`` for every import of a serve sub-package into one listed before it (or into a
    top-level module other than ``config`` and ``errors``)."""
    prefix = f"{PACKAGE}.serve."
    rank = {layer: i for i, layer in enumerate(layers)}

    def layer_of(module: str) -> str | None:
        if not module.startswith(prefix):
            return None
        head = module[len(prefix):].split(".")[0]
        return head if head in rank else None

    found = []
    for importer, imported in sorted(graph.items()):
        own = layer_of(importer)
        if own is None:
            continue
        for target in sorted(imported):
            theirs = layer_of(target)
            if theirs is None:
                shared = target in SERVE_SHARED or target.startswith(f"{PACKAGE}.serve.protocol.")
                if target.startswith(prefix) and not shared:
                    found.append(f"{importer} → {target}")
            elif theirs != own and rank[theirs] > rank[own]:
                found.append(f"{importer} → {target}")
    return found


def test_layer_check_on_a_hand_made_graph():
    graph = {
        "livethink.serve.budget.plan": {"livethink.serve.config"},
        "livethink.serve.engines.base": {"livethink.serve.budget.plan"},
        "livethink.serve.budget.controller": {"livethink.serve.engines.base", "livethink.serve.dry_run"},
    }
    assert layer_violations(graph) == [
        "livethink.serve.budget.controller → livethink.serve.dry_run",
        "livethink.serve.budget.controller → livethink.serve.engines.base",
    ]


def test_serve_sub_packages_import_only_the_layers_below():
    found = layer_violations(import_graph())
    assert not found, "imports against livethink.serve's layering:\n" + "\n".join(found)
