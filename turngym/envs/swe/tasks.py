"""SWE tasks: a shipped repository plus one injected bug, validated by running the tests.

A task records the buggy file, the FAIL_TO_PASS tests (fail with the bug, pass without it),
the PASS_TO_PASS tests (pass both ways), the gold patch (the inverse diff), the buggy
function's location (for the localization signal) and an issue-style problem statement written
from the *failing behaviour* (test names and assertion messages), never from the diff.

Generation runs the suite once per candidate mutation (~0.3 s each), so the shipped task set
is generated once and stored as JSONL (``tasks/swe/tasks.jsonl``); ``generate_tasks`` rebuilds
it bit for bit from the same seed.
"""

from __future__ import annotations

import difflib
import functools
import random
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from turngym.core.errors import ConfigError, TaskError
from turngym.core.task import Task, read_jsonl
from turngym.envs.swe.mutations import Mutation, propose_mutations
from turngym.envs.swe.repos import REPO_NAMES, Tree, load_repo, repos_dir
from turngym.envs.swe.testing import TestRun, run_pytest

__all__ = ["SWETask", "generate_tasks", "load_tasks", "buggy_tree", "default_tasks_path", "check_task"]


@dataclass(frozen=True)
class SWETask(Task):
    """One bug to fix (``gold`` is the gold patch as a unified diff).

    Attributes:
        repo: shipped repository name.
        path: the buggy file.
        buggy_source: full text of the buggy file.
        function: qualified name of the buggy function.
        func_lines: its (first, last) lines in the buggy file.
        operator: the mutation operator that made the bug.
        fail_to_pass / pass_to_pass: test ids, SWE-bench semantics.
        gold_old / gold_new: the buggy function's text and its fixed text — one unique
            ``replace`` that applies the gold patch (what the oracle does).
    """

    repo: str = ""
    path: str = ""
    buggy_source: str = ""
    function: str = ""
    func_lines: tuple[int, int] = (0, 0)
    operator: str = ""
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    gold_old: str = ""
    gold_new: str = ""


def _safe_relpath(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and "\0" not in path and "\\" not in path and ".." not in parts and "" not in parts


def check_task(task: SWETask, *, shipped: bool = True) -> None:
    """Raise :class:`ConfigError` unless every path of ``task`` stays inside its repository.

    ``shipped`` tasks take their tree from ``tasks/swe/repos``: their ``repo`` must name one
    of those repositories (never a host path). Test ids must be repository paths, not
    command-line options.
    """
    where = f"SWE task {task.id!r}"
    if shipped and task.repo not in REPO_NAMES:
        raise ConfigError(f"{where}: repo {task.repo!r} is not a shipped repository ({', '.join(REPO_NAMES)}); "
                          "SWE-bench instances load with SWEEnv(swebench=..., repo_dirs=...)")
    if not _safe_relpath(task.path):
        raise ConfigError(f"{where}: path {task.path!r} must be a relative path inside the repository (no '..')")
    for test in (*task.fail_to_pass, *task.pass_to_pass):
        if test.startswith("-") or not _safe_relpath(test.split("::", 1)[0]):
            raise ConfigError(f"{where}: test id {test!r} must look like 'tests/test_x.py::test_name'")
    if not task.fail_to_pass:
        raise ConfigError(f"{where}: no FAIL_TO_PASS tests")


def buggy_tree(task: SWETask) -> Tree:
    """The repository with the task's bug in it."""
    return load_repo(task.repo).with_file(task.path, task.buggy_source)


def _function_text(text: str, lines: tuple[int, int]) -> str:
    return "".join(text.splitlines(keepends=True)[lines[0] - 1 : lines[1]])


def _humanize(test_id: str) -> str:
    name = test_id.rsplit("::", 1)[-1]
    words = name.removeprefix("test_").replace("_", " ")
    return words


def _statement(repo: str, run: TestRun, f2p: Sequence[str]) -> str:
    messages = dict(run.messages)
    first = f2p[0]
    msg = messages.get(first, "").strip()
    # drop object addresses so statements are stable across runs
    msg = re.sub(r" at 0x[0-9a-f]+", "", msg)
    lines = [
        f"{repo}: {_humanize(first)} is broken",
        "",
        f"After the latest change, `{first}` fails in the `{repo}` package:",
        "",
        "```",
        *msg.splitlines()[:12],
        "```",
    ]
    others = list(f2p[1:])
    if others:
        shown = ", ".join(f"`{t.rsplit('::', 1)[-1]}`" for t in others[:5])
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        lines += ["", f"These tests fail too: {shown}{more}."]
    lines += ["", "Please fix the library so that the test suite passes again, without changing the tests."]
    return "\n".join(lines)


def _make_task(repo: str, tree: Tree, base: TestRun, m: Mutation) -> SWETask | None:
    original = tree[m.path]
    buggy = m.apply(original)
    run = run_pytest(tree.with_file(m.path, buggy))
    if not run.imports_ok:
        return None
    f2p = sorted(base.passed & run.failed)
    if not f2p:
        return None
    p2p = sorted(base.passed & run.passed)
    gold = "".join(
        difflib.unified_diff(
            buggy.splitlines(keepends=True), original.splitlines(keepends=True),
            fromfile=f"a/{m.path}", tofile=f"b/{m.path}",
        )
    )
    gold_old = _function_text(buggy, m.func_lines)
    # the fixed function spans the same lines, shifted by the line-count change of the span
    fixed_end = m.func_lines[1] + original[m.start : m.end].count("\n") - m.replacement.count("\n")
    gold_new = _function_text(original, (m.func_lines[0], fixed_end))
    if buggy.count(gold_old) != 1:
        return None
    return SWETask(
        id=f"swe/{repo}/{m.function}/{m.operator}/{m.start}",
        prompt=_statement(repo, run, f2p),
        gold=gold,
        meta={"repo": repo, "operator": m.operator, "n_fail_to_pass": len(f2p), "source": "generated"},
        repo=repo,
        path=m.path,
        buggy_source=buggy,
        function=m.function,
        func_lines=m.func_lines,
        operator=m.operator,
        fail_to_pass=tuple(f2p),
        pass_to_pass=tuple(p2p),
        gold_old=gold_old,
        gold_new=gold_new,
    )


def generate_tasks(
    repos: Iterable[str] = REPO_NAMES,
    *,
    seed: int = 0,
    max_per_repo: int | None = None,
    workers: int = 2,
    progress: bool = False,
) -> list[SWETask]:
    """Inject every candidate mutation, keep those that break ≥ 1 test and still import.

    Candidates are visited in a seeded shuffled order; ``max_per_repo`` keeps the first valid ones.
    """
    tasks: list[SWETask] = []
    for repo in repos:
        tree = load_repo(repo)
        base = run_pytest(tree)
        if base.failed or not base.passed:
            raise TaskError(f"repository {repo} does not pass its own suite: {sorted(base.failed)[:3]}")
        candidates = [
            m for path in tree if path.endswith(".py") and not path.startswith("tests/")
            for m in propose_mutations(path, tree[path])
        ]
        random.Random(f"{seed}/{repo}").shuffle(candidates)
        kept: list[SWETask] = []
        with ThreadPoolExecutor(max_workers=workers) as pool:
            it = pool.map(functools.partial(_make_task, repo, tree, base), candidates)
            if progress:
                from tqdm import tqdm

                it = tqdm(it, total=len(candidates), desc=f"bugs in {repo}")
            for task in it:
                if task is not None and (max_per_repo is None or len(kept) < max_per_repo):
                    kept.append(task)
        tasks.extend(sorted(kept, key=lambda t: t.id))
    return tasks


def default_tasks_path() -> Path:
    return repos_dir().parent / "tasks.jsonl"


def load_tasks(path: str | Path | None = None) -> list[SWETask]:
    """Load tasks from JSONL (default: the shipped ``tasks/swe/tasks.jsonl``)."""
    path = Path(path) if path is not None else default_tasks_path()
    if not path.exists():
        raise TaskError(f"{path} does not exist; generate it with `python -m turngym.envs.swe.generate`")
    return [SWETask.from_dict(row) for row in read_jsonl(path)]
