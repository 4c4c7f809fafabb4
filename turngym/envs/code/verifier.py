"""Pure verdicts for the code env: syntax, per-turn signals, feedback text, the outcome."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from turngym.core.parsing import python_syntax_error
from turngym.envs.code.runner import Evaluation, TestResult

__all__ = ["syntax_error", "turn_signals", "feedback", "outcome", "failed_evaluation"]

FeedbackMode = Literal["traceback", "names"]


def syntax_error(code: str) -> str | None:
    """The compiler's complaint about ``code``, or None if it compiles.

    Never raises: NUL bytes, lone surrogates and chains too deep for the compiler (a 40 KB
    ``1+1+…+1`` is a ``RecursionError`` inside ``compile()``) are complaints like any other
    (:func:`~turngym.core.parsing.python_syntax_error`).

    >>> syntax_error("def f(:\\n    pass")
    'SyntaxError: invalid syntax (solution.py, line 1)'
    >>> syntax_error("x = 1") is None
    True
    """
    return python_syntax_error(code, filename="solution.py")


def failed_evaluation(names: Sequence[str], reason: str) -> Evaluation:
    """An evaluation where nothing loaded (code that does not compile is never run)."""
    return Evaluation(False, reason, tuple(TestResult(n, False, reason) for n in names))


def turn_signals(prev: Sequence[bool] | None, cur: Evaluation, *, parses: bool) -> dict[str, float]:
    """Process signals of a test/submit turn.

    ``newly_fixed`` and ``regressions`` compare with the previous evaluated solution (none
    yet = every test failing), as fractions of the test count.

    >>> ev = Evaluation(True, None, (TestResult("a", True), TestResult("b", False)))
    >>> turn_signals((False, True), ev, parses=True)
    {'parses': 1.0, 'runs': 1.0, 'pass_rate': 0.5, 'newly_fixed': 0.5, 'regressions': 0.5}
    """
    now = cur.passed
    n = len(now) or 1
    before = tuple(prev) if prev is not None else (False,) * len(now)
    fixed = sum(1 for b, a in zip(before, now) if a and not b)
    broken = sum(1 for b, a in zip(before, now) if b and not a)
    return {
        "parses": 1.0 if parses else 0.0,
        "runs": 1.0 if cur.loaded else 0.0,
        "pass_rate": cur.pass_rate,
        "newly_fixed": fixed / n,
        "regressions": broken / n,
    }


def feedback(ev: Evaluation, *, mode: FeedbackMode = "traceback", max_chars: int = 2000) -> str:
    """What the agent reads after a test turn: the score, failing test names, short errors."""
    n, k = len(ev.results), ev.n_passed
    if not ev.loaded:
        text = f"Your code failed before any test could run:\n{ev.load_error}"
        if ev.output:
            text += f"\n--- it printed ---\n{ev.output[:500]}"
        return _cap(text + f"\nTests: 0/{n} passed.", max_chars)
    failing = [r for r in ev.results if not r.passed]
    lines = [f"Tests: {k}/{n} passed."]
    if failing:
        lines.append("Failing: " + ", ".join(r.name for r in failing))
        if mode == "traceback":
            for r in failing:
                lines.append(f"--- {r.name} ---\n{r.error or 'failed'}")
    return _cap("\n".join(lines), max_chars)


def _cap(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 20] + "\n...[truncated]"


def outcome(ev: Evaluation) -> dict[str, object]:
    """The final verdict: success iff every hidden test passes."""
    ok = ev.all_passed
    return {"reward": 1.0 if ok else 0.0, "success": ok, "pass_rate": ev.pass_rate, "tests": len(ev.results)}
