"""Run solutions against their tests in the sandbox, many problems per sandbox run.

One sandbox launch costs ~20 ms and one interpreter start; a HumanEval problem's tests take
well under that. :func:`evaluate_many` therefore ships a batch of problems to one run of the
:mod:`~turngym.envs.code.harness` and reads back one result line per test.

What is the solution's fault and what is the sandbox's: a run killed by a limit, or a
solution that crashes the interpreter, fails the tests it did not reach. A harness that never
started (interpreter missing, the launcher broken) raises :class:`SandboxError`, which envs
report as ``infra_error``.
"""

from __future__ import annotations

import ast
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from turngym.envs.code.harness import same_value
from turngym.sandbox import Limits, RunResult, Sandbox, SandboxError

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


@lru_cache(maxsize=1)
def _harness_source() -> str:
    return resources.files("turngym.envs.code").joinpath("harness.py").read_text(encoding="utf-8") + "\nmain()\n"


def _why_stopped(res) -> str:  # type: ignore[no-untyped-def]
    if res.limit_hit:
        return f"the test run was killed ({res.limit_hit} limit exceeded)"
    tail = res.stderr.strip().splitlines()[-1:] if res.stderr.strip() else []
    how = f"signal {res.signal}" if res.signal is not None else f"exit code {res.exit_code}"
    return f"the test process died ({how}){': ' + tail[0][:200] if tail else ''}"


def evaluate_many(
    sandbox: Sandbox,
    problems: Sequence[Problem],
    *,
    per_test_s: float = 2.0,
    error_chars: int = 600,
    limits: Limits | None = None,
    run_python: Callable[..., RunResult] | None = None,
) -> list[Evaluation]:
    """Evaluate every problem in one sandbox run; results in input order.

    ``limits`` defaults to the sandbox's, with the wall/CPU budget raised to cover every
    test's own timeout and the output cap to the result volume. ``run_python`` replaces
    ``sandbox.run_python`` (e.g. a :class:`~turngym.sandbox.WarmPython`'s ``run``).
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
        "problems": [
            # Value tests travel as [name, call, "value"]: the expected value stays here.
            {"id": p.id, "solution": p.solution, "entry_point": p.entry_point, "setup": p.setup,
             "tests": [[t[0], t[1], "value"] if len(t) > 2 else list(t) for t in p.tests]}
            for p in problems
        ],
        "per_test_s": per_test_s,
        "error_chars": error_chars,
    }
    run = run_python or sandbox.run_python
    res = run(_harness_source(), stdin=nonce + "\n" + json.dumps(payload), limits=limits)
    events = []
    for line in res.stdout.splitlines():
        if line.startswith(nonce):
            try:
                events.append(json.loads(line[len(nonce):]))
            except json.JSONDecodeError:
                continue  # a line cut by the output limit
    if not events or events[0].get("event") != "start":
        raise SandboxError(f"the test harness did not start in the sandbox: {res.summary(500)}")
    loads: dict[str, dict] = {}
    tests: dict[str, dict[str, dict]] = {}
    for ev in events:
        if ev.get("event") == "load":
            loads[ev["id"]] = ev
        elif ev.get("event") == "test":
            tests.setdefault(ev["id"], {})[ev["name"]] = ev
    finished = events[-1].get("event") == "done"
    stop = "" if finished else _why_stopped(res)
    out: list[Evaluation] = []
    for p in problems:
        load = loads.get(p.id)
        if load is None:
            out.append(Evaluation(False, stop or "the solution was not loaded", tuple(TestResult(t[0], False, stop) for t in p.tests)))
            continue
        got = tests.get(p.id, {})
        results = tuple(_verdict(t, got.get(t[0]), stop) for t in p.tests)
        if not load["ok"]:
            results = tuple(TestResult(t[0], False, "the solution did not load") for t in p.tests)
        out.append(Evaluation(bool(load["ok"]), load["error"], results, load.get("output", "")))
    return out


def _short(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _verdict(test: tuple[str, ...], event: dict | None, stop: str) -> TestResult:
    """A test's result from its harness event; value tests are judged here, on the host."""
    name = test[0]
    if event is None:
        return TestResult(name, False, stop or "not run")
    if event.get("error") or len(test) < 3:
        return TestResult(name, bool(event.get("passed")), event.get("error"))
    try:
        got = ast.literal_eval(event.get("value") or "")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return TestResult(name, False, "the returned value could not be read back")
    if same_value(got, ast.literal_eval(test[2])):
        return TestResult(name, True)
    return TestResult(name, False, f"{test[1]}\nAssertionError: expected {_short(test[2])}, got {_short(event['value'])}")


def evaluate(sandbox: Sandbox, problem: Problem, **kwargs: Any) -> Evaluation:
    """Evaluate one problem (see :func:`evaluate_many`)."""
    return evaluate_many(sandbox, [problem], **kwargs)[0]  # type: ignore[arg-type]
