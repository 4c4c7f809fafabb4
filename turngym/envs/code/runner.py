"""Run solutions against their tests in the sandbox, many problems per sandbox run.

One sandbox launch costs ~20 ms and one interpreter start; a HumanEval problem's tests take
well under that. :func:`evaluate_many` therefore ships a batch of problems to one run of the
:mod:`~turngym.envs.code.harness` and reads back one result line per test.

What is the solution's fault and what is the sandbox's: once the grader has reported that it
started, a run killed by a limit, or by the solution (it can kill its grader, its worker, its
sandbox), fails the tests it did not reach. Only a grader that demonstrably never started
(interpreter missing, the launcher broken) raises :class:`SandboxError`, which envs report as
``infra_error``. See :mod:`~turngym.envs.code.harness` for why the verdict cannot be forged.
"""

from __future__ import annotations

import ast
import inspect
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from turngym.envs.code.wire import MAX_FRAME, PAYLOAD_FILE
from turngym.sandbox import Limits, RunResult, Sandbox, SandboxError
from turngym.sandbox.inline import inline_module, inside_prelude
from turngym.sandbox.inside.codec import decode, encode_obj, same_value

__all__ = ["Problem", "TestResult", "Evaluation", "evaluate", "evaluate_many"]


@dataclass(frozen=True, slots=True)
class Problem:
    """A solution and the tests to run on it."""

    id: str
    solution: str
    entry_point: str
    tests: tuple[tuple[str, ...], ...]
    """``(name, code)``: the code raises if the test fails; or ``(name, call, expected)``: the
    call's value is compared with ``expected`` (a Python literal) on the host."""
    setup: str = ""


@dataclass(frozen=True, slots=True)
class TestResult:
    name: str
    passed: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of one solution: did it load, and which tests passed."""

    loaded: bool
    load_error: str | None
    results: tuple[TestResult, ...]
    output: str = ""

    @property
    def passed(self) -> tuple[bool, ...]:
        return tuple(r.passed for r in self.results)

    @property
    def n_passed(self) -> int:
        return sum(self.passed)

    @property
    def pass_rate(self) -> float:
        return self.n_passed / len(self.results) if self.results else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.results) and all(self.passed)


def _module_source(name: str) -> str:
    return resources.files("turngym.envs.code").joinpath(name).read_text(encoding="utf-8")


def _shipped(source: str) -> str:
    """``source`` preceded by the toolkit modules both sides use and :mod:`.wire` (as
    ``_turngym_wire``): the sandbox cannot import turngym (and must not need to)."""
    wire = inline_module("_turngym_wire", _module_source("wire.py"), "wire.py")
    return inside_prelude("codec", "framing", "hardening") + wire + source


@lru_cache(maxsize=1)
def _candidate_source() -> str:
    """The solution's side, run as a fresh interpreter when the grader replaces its zygote."""
    return _shipped(_module_source("candidate.py") + "\nmain()\n")


@lru_cache(maxsize=1)
def _harness_source() -> str:
    """The grader: :mod:`.harness` after its process control (:mod:`.processes`, as
    ``_turngym_code_processes``), which only the grader gets: the candidate's source has none of it.
    Its code's file name is ``<processes.py>``, as ``<string>`` was the harness's: a traceback never
    reads a file of that name from the working dir, where the solution writes."""
    processes = inline_module("_turngym_code_processes", _module_source("processes.py"), "processes.py")
    return _shipped(processes + _module_source("harness.py") + f"\nmain({_candidate_source()!r})\n")


def _why_stopped(res: RunResult) -> str:
    if res.limit_hit:
        return f"the test run was killed ({res.limit_hit} limit exceeded)"
    tail = res.stderr.strip().splitlines()[-1:] if res.stderr.strip() else []
    how = f"signal {res.signal}" if res.signal is not None else f"exit code {res.exit_code}"
    return (f"the test run ended early ({how}): the solution killed or stopped the grader or its sandbox"
            f"{': ' + tail[0][:200] if tail else ''}")


def _events(res: RunResult, nonce: str) -> list[dict[str, Any]]:
    events = []
    for line in res.stdout.splitlines():
        if line.startswith(nonce):
            try:
                ev = json.loads(line[len(nonce):])
            except (json.JSONDecodeError, RecursionError):
                continue  # a line cut by the output limit
            if isinstance(ev, dict):
                events.append(ev)
    return events


def evaluate_many(
    sandbox: Sandbox,
    problems: Sequence[Problem],
    *,
    per_test_s: float = 2.0,
    error_chars: int = 600,
    limits: Limits | None = None,
    run_python: Callable[..., RunResult] | None = None,
    details: bool = True,
) -> list[Evaluation]:
    """Evaluate every problem in one sandbox run; results in input order.

    ``limits`` defaults to the sandbox's, with the wall/CPU budget raised to cover every
    test's own timeout and the output cap to the result volume. ``run_python`` replaces
    ``sandbox.run_python`` (e.g. the env's warm worker); like it, it must accept ``files=``.
    ``details=False``: a failing code test reports only its exception type, no test text or
    values (for agents that must not see the tests: that text would otherwise pass through
    the sandbox's warm worker, which the agent's later runs are forked from).

    Who is at fault: once the grader has reported that it started, a run that dies (the
    solution killed it, its worker or its sandbox, or hit a limit) fails the tests it did
    not reach. A run with no sign of the grader is retried once as a fresh one-shot sandbox
    run (a warm worker the solution killed loses the grader's report); only if that one shows
    no sign either, or the grader says it could not start its solution runner, is it
    :class:`SandboxError` (``infra_error``).
    """
    if not problems:
        return []
    n_tests = sum(len(p.tests) + 2 for p in problems)
    budget = 2.0 + per_test_s * n_tests
    base = limits or sandbox.limits
    limits = base.replace(
        wall_s=max(base.wall_s, budget), cpu_s=max(base.cpu_s, budget),
        output_bytes=max(base.output_bytes, n_tests * (error_chars + 300) + (2000 + 300) * len(problems)),
    )
    nonce = secrets.token_hex(16)
    payload = {
        "nonce": nonce,
        "problems": [
            # Value tests travel as [name, call, "value"]: the expected value stays here.
            {"id": p.id, "solution": p.solution, "entry_point": p.entry_point, "setup": p.setup,
             "tests": [[t[0], t[1], "value", _call_spec(t[1])] if len(t) > 2 else list(t) for t in p.tests]}
            for p in problems
        ],
        "per_test_s": per_test_s,
        "error_chars": error_chars,
        "details": details,
    }
    # The payload goes in a file the grader deletes before any solution code runs, not on
    # stdin: a warm worker would keep it in memory that later runs are forked from.
    files = {PAYLOAD_FILE: json.dumps(payload)}
    # The grader runs *trusted*: where the sandbox has a second uid, the solution runs as that
    # one and cannot signal, stop or read the grader (see turngym.sandbox Session.run_trusted).
    runs: list[tuple[Callable[..., RunResult], dict[str, Any]]] = []
    if run_python is not None and run_python == sandbox.run_python:
        run_python = None  # the sandbox's own one-shot runner: its trusted twin below
    if run_python is not None:
        runs.append((run_python, {"trusted": True} if _takes_trusted(run_python) else {}))
    runs.append((sandbox.run_trusted_python, {}))
    for run, extra in runs:
        res = run(_harness_source(), files=files, limits=limits, **extra)
        events = _events(res, nonce)
        if events and events[0].get("event") == "start":
            break
    else:
        raise SandboxError(f"the test harness did not start in the sandbox: {res.summary(500)}")
    infra = next((ev for ev in events if ev.get("event") == "infra"), None)
    if infra is not None:
        raise SandboxError(f"the test harness could not start the solution runner: {str(infra.get('error'))[:300]}")
    loads: dict[str, dict] = {}
    tests: dict[str, dict[str, dict]] = {}
    for ev in events:
        if ev.get("event") == "load" and isinstance(ev.get("id"), str):
            loads[ev["id"]] = ev
        elif ev.get("event") == "test" and isinstance(ev.get("id"), str):
            tests.setdefault(ev["id"], {})[str(ev.get("name"))] = ev
    finished = events[-1].get("event") == "done"
    stop = "" if finished else _why_stopped(res)
    out: list[Evaluation] = []
    for p in problems:
        load = loads.get(p.id)
        if load is None:
            out.append(Evaluation(False, stop or "the solution was not loaded", tuple(TestResult(t[0], False, stop) for t in p.tests)))
            continue
        if load.get("ok") is not True:
            results = tuple(TestResult(t[0], False, "the solution did not load") for t in p.tests)
        else:
            got = tests.get(p.id, {})
            results = tuple(_verdict(t, got.get(t[0]), stop) for t in p.tests)
        out.append(Evaluation(load.get("ok") is True, _text(load.get("error")), results, _text(load.get("output")) or ""))
    return out


def _takes_trusted(fn: Callable[..., Any]) -> bool:
    """``fn`` accepts ``trusted=`` (a warm worker's run does; a caller's own runner may not)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "trusted" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _call_spec(call: str) -> dict[str, Any] | None:
    """``{"fn", "args", "kwargs"}`` if ``call`` is a plain call with literal arguments (then the
    grader can send a row of such tests to the solution in one request), else None."""
    try:
        node = ast.parse(call, mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or any(
            isinstance(a, ast.Starred) for a in node.args
        ) or any(k.arg is None for k in node.keywords):
            return None
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        return {"fn": node.func.id, "args": encode_obj(args), "kwargs": encode_obj(kwargs)}
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _short(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _verdict(test: tuple[str, ...], event: dict | None, stop: str) -> TestResult:
    """A test's result from its grader event.

    Value tests are judged here, on the host, from the returned value alone (the grader's
    ``passed`` flag is not consulted for them); a code test passes only if the grader says
    so and reports no error.
    """
    name = test[0]
    if event is None:
        return TestResult(name, False, stop or "not run")
    error = _text(event.get("error"))
    if len(test) < 3:
        ok = event.get("passed") is True and error is None
        return TestResult(name, ok, None if ok else error or "failed")
    if error is not None:
        return TestResult(name, False, error)
    try:
        got = decode(event.get("value"), MAX_FRAME)  # type: ignore[arg-type]
    except ValueError:
        return TestResult(name, False, "the returned value could not be read back")
    if same_value(got, ast.literal_eval(test[2])):
        return TestResult(name, True)
    return TestResult(name, False, f"{test[1]}\nAssertionError: expected {_short(test[2])}, got {_short(repr(got))}")


def evaluate(sandbox: Sandbox, problem: Problem, **kwargs: Any) -> Evaluation:
    """Evaluate one problem (see :func:`evaluate_many`)."""
    return evaluate_many(sandbox, [problem], **kwargs)[0]  # type: ignore[arg-type]
