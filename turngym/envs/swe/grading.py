"""The hidden evaluation's tree: the agent's code with the task's own tests and test config.

The agent may edit any file, but what grades it must come from the task: before the hidden
evaluation runs, every file in the task's test directories is put back as the task shipped it
(edited tests restored, deleted ones recreated, added ones dropped), the ``conftest.py`` files
are exactly the task's pristine ones (an agent ``conftest.py`` anywhere is dropped), and files
that only matter to an interpreter or test runner looking for hooks (``sitecustomize.py``,
``usercustomize.py``, ``*.pth``, ``pytest.py``, ``_pytest/``, ``pluggy/``, ``py.py``,
``__pycache__``, ``*.pyc``) are removed. The runner (:mod:`turngym.envs.swe.testing`) would
ignore all of those anyway; removing them keeps the evaluated tree free of them if a runner
ever changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from turngym.envs.swe.repos import Tree
from turngym.envs.swe.tasks import SWETask
from turngym.envs.swe.testing import TestRun, run_pytest

__all__ = ["grading_tree", "protected_dirs", "evaluate"]

_HOOK_NAMES = {"sitecustomize.py", "usercustomize.py", "pytest.py", "py.py", "conftest.py"}
_HOOK_DIRS = {"pytest", "_pytest", "pluggy", "__pycache__"}


def _test_files(task: SWETask) -> set[str]:
    return {t.split("::", 1)[0] for t in (*task.fail_to_pass, *task.pass_to_pass)}


def protected_dirs(task: SWETask) -> tuple[str, ...]:
    """The directories whose files the evaluation takes from the task, never from the agent."""
    dirs = {f.rsplit("/", 1)[0] if "/" in f else "" for f in _test_files(task)}
    if task.meta.get("source") == "generated":
        dirs.add("tests")
    return tuple(sorted(dirs))


def _inside(path: str, dirs: Iterable[str]) -> bool:
    return any(d == "" and "/" not in path or d and path.startswith(d + "/") for d in dirs)


def _is_hook_file(path: str) -> bool:
    parts = path.split("/")
    return parts[-1] in _HOOK_NAMES or parts[-1].endswith((".pth", ".pyc", ".pyo")) or any(p in _HOOK_DIRS for p in parts[:-1])


def grading_tree(task: SWETask, tree: Tree, pristine: Tree) -> Tree:
    """``tree`` with the task's tests and conftests restored from ``pristine`` and hook files removed."""
    dirs = protected_dirs(task)
    tests = _test_files(task)
    files = {p: t for p, t in tree.items() if not _is_hook_file(p) and not _inside(p, dirs) and p not in tests}
    for p, t in pristine.items():
        # a repository may legitimately ship such a file (pytest's own repo has _pytest/): its own copy
        if _inside(p, dirs) or p in tests or _is_hook_file(p):
            files[p] = t
    return Tree(files)


def evaluate(task: SWETask, tree: Tree, pristine: Tree) -> TestRun:
    """The hidden evaluation of ``tree``: the task's tests on the agent's code, canary included."""
    # generated tasks: the whole (small) suite; imported tasks (SWE-bench): only the tests the
    # instance names, as its harness does
    generated = task.meta.get("source") == "generated"
    tests = None if generated else sorted({*task.fail_to_pass, *task.pass_to_pass})
    return run_pytest(grading_tree(task, tree, pristine), tests, canary=True, split=generated, test_dirs=protected_dirs(task))
