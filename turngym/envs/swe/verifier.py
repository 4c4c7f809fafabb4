"""Pure verdicts for the SWE env: how far a tree is from fixed, and whether an edit localized.

SWE-bench semantics: a task is *resolved* when every FAIL_TO_PASS test passes and no
PASS_TO_PASS test fails. The per-turn signals are the same facts measured on the current tree.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from turngym.core.parsing import parse_python
from turngym.envs.swe.grading import evaluate, hidden_cases_of
from turngym.envs.swe.hidden import gold_observations, hidden_failing
from turngym.envs.swe.repos import Tree
from turngym.envs.swe.tasks import SWETask

__all__ = ["Progress", "measure", "function_span", "edit_touches_function"]


@dataclass(frozen=True, slots=True)
class Progress:
    """The hidden evaluation of one tree (``reason``: why its verdicts do not count, if so;
    ``hidden_failing``: the fraction of hidden cases where the code disagrees with the gold one)."""

    f2p_passing: float
    p2p_failing: float
    imports_ok: bool
    reason: str = ""
    hidden_failing: float = 0.0

    @property
    def resolved(self) -> bool:
        return (self.imports_ok and not self.reason and self.f2p_passing == 1.0 and self.p2p_failing == 0.0
                and self.hidden_failing == 0.0)


def measure(task: SWETask, tree: Tree, pristine: Tree) -> Progress:
    """Grade ``tree`` with the task's own tests (taken from ``pristine``) and its hidden cases
    (checked against the gold package's answers), and score it.

    A run that was tampered with, ended early or timed out counts no test as passing: the
    agent's failure, with the reason, never an infrastructure error.
    """
    run = evaluate(task, tree, pristine)
    spec = hidden_cases_of(task)
    hidden = hidden_failing(run, gold_observations(task.repo, spec)) if spec is not None else 0.0
    if not run.imports_ok:
        reason = run.problem or "the test suite could not be collected (import error?)"
        return Progress(0.0, 1.0 if task.pass_to_pass else 0.0, False, reason, 1.0 if spec is not None else 0.0)
    f2p = sum(t in run.passed for t in task.fail_to_pass) / len(task.fail_to_pass)
    p2p = sum(t not in run.passed for t in task.pass_to_pass) / len(task.pass_to_pass) if task.pass_to_pass else 0.0
    return Progress(f2p, p2p, True, hidden_failing=hidden)


def function_span(source: str, qualname: str) -> tuple[int, int] | None:
    """Lines (first, last) of ``qualname`` (``func`` or ``Class.method``) in ``source``.

    ``source`` is the agent's file: None for text that does not parse, whyever (a chain too
    deep for the parser is a ``RecursionError``/``MemoryError``, see
    :func:`~turngym.core.parsing.parse_python`), never an exception out of ``step``.
    """
    tree = parse_python(source).value
    if not isinstance(tree, ast.Module):
        return None
    parts = qualname.split(".")
    body = tree.body
    node: ast.AST | None = None
    for part in parts:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
        body = node.body  # type: ignore[attr-defined]
    return node.lineno, node.end_lineno  # type: ignore[union-attr]


def edit_touches_function(task: SWETask, before: Tree, edit: tuple[str, int, int]) -> bool:
    """Did an edit of lines [first, last] of ``path`` overlap the buggy function (as it stood)?"""
    path, first, last = edit
    if path != task.path:
        return False
    span = function_span(before[path], task.function) if path in before else None
    if span is None:
        return False
    return first <= span[1] and span[0] <= last
