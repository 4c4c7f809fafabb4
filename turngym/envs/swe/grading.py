"""The hidden evaluation's tree: the agent's code with the task's own tests and test config.

The agent may edit any file, but what grades it must come from the task: before the hidden
evaluation runs, every file in the task's test directories is put back as the task shipped it
(edited tests restored, deleted ones recreated, added ones dropped), the ``conftest.py`` files
are exactly the task's pristine ones (an agent ``conftest.py`` anywhere is dropped), and files
that only matter to an interpreter or test runner looking for hooks (``sitecustomize.py``,
``usercustomize.py``, ``*.pth``, ``pytest.py``, ``_pytest/``, ``pluggy/``, ``py.py``,
``__pycache__``, ``*.pyc``, a top-level ``__init__.py`` that would make the whole tree a
package pytest imports while collecting) are removed. The runner
(:mod:`turngym.envs.swe.testing`) would ignore most of those anyway; removing them keeps the
evaluated tree free of them if a runner ever changes.

Which runner grades is the task's :func:`grader`: the **split** grader (the tests and the
verdict in a process that never imports the agent's code) for every task unless an imported
task was explicitly loaded with ``grader="inprocess"``. The split grader runs every module
under the test files' *top-level* directories in the judging process, so for it those whole
directories are the task's (:func:`protected_dirs`): nothing the agent writes there is run.
"""

from __future__ import annotations

from collections.abc import Iterable

from turngym.core.errors import ConfigError
from turngym.envs.swe.hidden import gold_observations, has_hidden_cases, hidden_failing, hidden_spec
from turngym.envs.swe.repos import Tree, load_repo
from turngym.envs.swe.tasks import SWETask, buggy_tree
from turngym.envs.swe.testing import TestRun, run_pytest

__all__ = ["grading_tree", "protected_dirs", "evaluate", "grader", "split_problem", "GRADERS", "hidden_cases_of", "validate_task"]

#: ``split``: tests and verdict apart from the code under test (unforgeable by that code);
#: ``inprocess``: pytest beside the code (any suite; its verdict is a claim of the agent's code).
GRADERS = ("split", "inprocess")

_HOOK_NAMES = {"sitecustomize.py", "usercustomize.py", "pytest.py", "py.py", "conftest.py"}
_HOOK_DIRS = {"pytest", "_pytest", "pluggy", "__pycache__"}


def grader(task: SWETask) -> str:
    """The runner that grades ``task``: ``meta["grader"]`` when an imported task names one, else split."""
    name = task.meta.get("grader", "split") if task.meta.get("source") != "generated" else "split"
    if name not in GRADERS:
        raise ConfigError(f"SWE task {task.id!r}: meta['grader'] must be one of {GRADERS}, got {name!r}")
    return str(name)


def _test_files(task: SWETask) -> set[str]:
    return {t.split("::", 1)[0] for t in (*task.fail_to_pass, *task.pass_to_pass)}


def protected_dirs(task: SWETask) -> tuple[str, ...]:
    """The directories whose files the evaluation takes from the task, never from the agent.

    In-process: the directories of the named test files. Split: their top-level directories
    whole, since the judging process imports whatever the tests import from there.
    """
    dirs = {f.rsplit("/", 1)[0] if "/" in f else "" for f in _test_files(task)}
    if task.meta.get("source") == "generated":
        dirs.add("tests")
    if grader(task) == "split":
        dirs = {d.split("/", 1)[0] for d in dirs}
    return tuple(sorted(dirs))


def split_problem(tests: Iterable[str], changed: Iterable[str], paths: Iterable[str] = ()) -> str:
    """Why the split grader cannot grade the test ids ``tests`` of a fix that changes ``changed``
    in a repository holding ``paths`` ("" if it can).

    The split grader runs the test directories in the judging process and serves every other
    top-level module from the code's process, so a test file must sit in a directory of its
    own, apart from the code the fix changes (``tests/test_x.py`` next to ``pkg/``, not
    ``pkg/tests/test_x.py`` nor ``test_x.py`` at the top), in a repository whose top level is
    no package (pytest would import its ``__init__.py``, and through it the code, while collecting).
    """
    if "__init__.py" in set(paths):
        return "the repository's top level is a package (__init__.py)"
    files = sorted({t.split("::", 1)[0] for t in tests})
    at_top = [f for f in files if "/" not in f]
    if at_top:
        return f"the test file(s) {at_top[:3]} sit at the repository's top level, among the code"
    tops = {f.split("/", 1)[0] for f in files}
    inside = sorted(p for p in changed if p.split("/", 1)[0] in tops)
    if inside:
        return (f"the fix changes {inside[:3]}, inside the tests' top-level director{'y' if len(tops) == 1 else 'ies'} "
                f"{sorted(tops)} (tests inside the package)")
    return ""


def _inside(path: str, dirs: Iterable[str]) -> bool:
    return any(d == "" and "/" not in path or d and path.startswith(d + "/") for d in dirs)


def _is_hook_file(path: str) -> bool:
    parts = path.split("/")
    return (parts[-1] in _HOOK_NAMES or parts[-1].endswith((".pth", ".pyc", ".pyo")) or path == "__init__.py"
            or any(p in _HOOK_DIRS for p in parts[:-1]))


def grading_tree(task: SWETask, tree: Tree, pristine: Tree) -> Tree:
    """``tree`` with the task's tests and conftests restored from ``pristine`` and hook files removed."""
    dirs = protected_dirs(task)
    tests = _test_files(task)
    # a top-level ``tests.py`` beside ``tests/`` would shadow (or be shadowed by) the tests' own package
    shadows = {f"{d}.py" for d in dirs if d and "/" not in d}
    files = {p: t for p, t in tree.items()
             if not _is_hook_file(p) and not _inside(p, dirs) and p not in tests and p not in shadows}
    for p, t in pristine.items():
        # a repository may legitimately ship such a file (pytest's own repo has _pytest/): its own copy
        if _inside(p, dirs) or p in tests or _is_hook_file(p) or p in shadows:
            files[p] = t
    return Tree(files)


def hidden_cases_of(task: SWETask) -> dict[str, object] | None:
    """The hidden cases that grade ``task`` beside its tests (a generated task of a shipped
    repository with a driver, graded split), or None (SWE-bench instances: their own tests only)."""
    if task.meta.get("source") != "generated" or grader(task) != "split" or not has_hidden_cases(task.repo):
        return None
    return hidden_spec(task.repo)


def evaluate(task: SWETask, tree: Tree, pristine: Tree) -> TestRun:
    """The hidden evaluation of ``tree``: the task's tests on the agent's code, canary included,
    and the hidden cases where the task has them (:func:`hidden_cases_of`)."""
    # generated tasks: the whole (small) suite; imported tasks (SWE-bench): only the tests the
    # instance names, as its harness does
    generated = task.meta.get("source") == "generated"
    tests = None if generated else sorted({*task.fail_to_pass, *task.pass_to_pass})
    return run_pytest(grading_tree(task, tree, pristine), tests, canary=True, split=grader(task) == "split",
                      test_dirs=protected_dirs(task), hidden=hidden_cases_of(task))


def validate_task(task: SWETask) -> list[str]:
    """Problems with a task: the buggy repo must fail F2P and the gold fix must resolve it (graded as the env grades);
    where the task has hidden cases, the buggy repo must disagree with the gold one on some and the fix on none."""
    problems = []
    start = buggy_tree(task)
    broken = evaluate(task, start, start)
    if not set(task.fail_to_pass) <= broken.failed:
        problems.append("some FAIL_TO_PASS tests pass on the buggy repository")
    fixed_src = task.buggy_source.replace(task.gold_old, task.gold_new, 1)
    fixed_tree = load_repo(task.repo).with_file(task.path, fixed_src)
    fixed = evaluate(task, fixed_tree, start)
    if fixed.problem:
        problems.append(f"the grader rejected the gold patch's run: {fixed.problem}")
    if not set(task.fail_to_pass) <= fixed.passed:
        problems.append("the gold patch does not make every FAIL_TO_PASS test pass")
    if not set(task.pass_to_pass) <= fixed.passed:
        problems.append("the gold patch breaks PASS_TO_PASS tests")
    if fixed_src != load_repo(task.repo)[task.path]:
        problems.append("gold_old -> gold_new does not restore the original file")
    spec = hidden_cases_of(task)
    if spec is not None:
        gold = gold_observations(task.repo, spec)
        if hidden_failing(broken, gold) == 0:
            problems.append("no hidden case catches the bug")
        if hidden_failing(fixed, gold):
            problems.append("the gold patch disagrees with the gold package on hidden cases")
    return problems
