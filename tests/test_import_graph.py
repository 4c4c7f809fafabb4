"""Imports inside ``turngym`` run one way: no module reaches itself again.

The graph is read from the source (AST), so it holds every ``import`` and ``from ... import``
statement: those at module level and those inside functions and methods, which run later but
still tie the modules into one knot (a change to one is a change to all of them). Imports under
``if TYPE_CHECKING:`` never run and are left out (an env's oracle may name the env's type).
"""

from __future__ import annotations

import ast
from pathlib import Path

import turngym
import turngym.trainers

ROOT = Path(turngym.trainers.__file__).parent
PACKAGE_ROOT = Path(turngym.__file__).parent


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Every module under ``root`` by dotted name (a package by its own name, for its ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def _resolve(name: str, here: str, is_package: bool, level: int) -> str:
    if not level:
        return name
    base = here.split(".") if is_package else here.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST):  # noqa: ANN202 - every node but those under ``if TYPE_CHECKING:``
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node) if not _is_type_checking(child))


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """``module -> modules of the package it imports``, from every import statement at any depth
    (but those under ``if TYPE_CHECKING:``, which never run)."""
    modules = _modules(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _nodes(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(node.module or "", name, is_package, node.level)
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_trainers_import_one_way() -> None:
    graph = import_graph(ROOT, "turngym.trainers")
    assert "turngym.trainers.learner" in graph and "turngym.trainers.advantages.grpo" in graph
    assert "turngym.trainers.losses" in graph["turngym.trainers.learner"]  # function-level imports are read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in turngym/trainers: " + " -> ".join(cycle or [])


def test_the_package_imports_one_way() -> None:
    """Every module of turngym (envs, study, proxy, ...), not only the trainers: issue 40's rule."""
    graph = import_graph(PACKAGE_ROOT, "turngym")
    assert "turngym.study.variance" in graph and "turngym.envs.swe.grading" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in turngym: " + " -> ".join(cycle or [])


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("class K:\n    def m(self):\n        import pkg.a\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("import os\n")
    assert find_cycle(import_graph(pkg, "pkg")) is None


def test_type_checking_imports_are_not_edges(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    assert find_cycle(import_graph(pkg, "pkg")) is None
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n")
    assert find_cycle(import_graph(pkg, "pkg")) == ["pkg.a", "pkg.b", "pkg.a"]
