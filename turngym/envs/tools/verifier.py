"""Pure verdicts for the tools env: gold replay, per-turn checks, the DB-diff potential.

The per-turn rule is BFCL's ``multi_turn_checker``, applied at the end of every user turn:

1. if the turn's gold has calls, the agent made at least one (BFCL: "empty turn");
2. the state equals the gold state after this turn (BFCL's ``state_checker``: every public
   attribute of every backend instance; the store: the database);
3. BFCL tasks: the gold calls' results of this turn are all among the results of the agent's
   calls so far, as a multiset (BFCL's ``response_checker``); store tasks: the facts the user
   asked for are in the agent's reply.

On a turn whose gold is empty (BFCL's miss_func / miss_param turns, where the right move is to
ask or decline) BFCL checks nothing, and neither does ``turn_passed``; the env's separate
``state_match`` signal still reports whether the agent changed the world when it should not
have (BFCL notices only if the change is still visible at the next checked turn).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turngym.core.answers import missing_answers
from turngym.envs.tools.backend import Backend
from turngym.envs.tools.state import FlatState, diff_count
from turngym.envs.tools.tasks import ToolsTask

__all__ = [
    "GoldTrace",
    "replay_gold",
    "call_key",
    "missing_results",
    "missing_answers",
    "progress",
]


def call_key(name: str, arguments: Mapping[str, Any]) -> str:
    """A canonical string for a call (argument order does not matter).

    >>> call_key("cd", {"folder": "a"}) == call_key("cd", {"folder": "a"})
    True
    """
    return name + json.dumps(arguments, sort_keys=True, default=repr)


@dataclass(frozen=True)
class GoldTrace:
    """What replaying a task's gold calls gives, computed once per task and cached.

    Attributes:
        initial: the backend before any call (copied at every reset; never mutated).
        states: the gold backend after each user turn (compared, never mutated).
        results: the gold calls' results, per turn.
        keys: per turn, the call keys of the gold calls of that turn *and all later turns*
            (a call among them is "needed").
        initial_public / goal_public: flat public states at the start and after the last turn.
        base_diff: how many paths differ between them (the potential's denominator).
    """

    initial: Backend
    states: tuple[Backend, ...]
    results: tuple[tuple[str, ...], ...]
    keys: tuple[frozenset[str], ...]
    initial_public: FlatState
    goal_public: FlatState
    base_diff: int


def replay_gold(task: ToolsTask, make_backend: Callable[[ToolsTask], Backend]) -> GoldTrace:
    """Replay the gold calls turn by turn from the initial state."""
    initial = make_backend(task)
    backend = initial.copy()
    states: list[Backend] = []
    results: list[tuple[str, ...]] = []
    for turn in task.gold:
        results.append(tuple(backend.call(c["name"], c["arguments"]).content for c in turn))
        states.append(backend.copy())
    keys: list[frozenset[str]] = []
    later: frozenset[str] = frozenset()
    for turn in reversed(task.gold):
        later = later | {call_key(c["name"], c["arguments"]) for c in turn}
        keys.append(later)
    keys.reverse()
    init_pub = initial.flat()[0]
    goal_pub = backend.flat()[0]
    return GoldTrace(
        initial, tuple(states), tuple(results), tuple(keys), init_pub, goal_pub, diff_count(init_pub, goal_pub)
    )


def missing_results(gold_results: Sequence[str], agent_results: Sequence[str]) -> list[str]:
    """Gold results not found among the agent's (each agent result used at most once).

    This is BFCL's ``_is_subsequence_unordered`` (order-free multiset inclusion).

    >>> missing_results(["a", "b", "a"], ["a", "b", "c"])
    ['a']
    """
    pool: dict[str, int] = {}
    for r in agent_results:
        pool[r] = pool.get(r, 0) + 1
    missing = []
    for r in gold_results:
        if pool.get(r, 0) > 0:
            pool[r] -= 1
        else:
            missing.append(r)
    return missing


def progress(current: FlatState, gold: GoldTrace) -> float:
    """DB-diff potential: ``1 - |diff(current, goal)| / |diff(initial, goal)|``, clipped to [0, 1].

    1.0 exactly when the public state equals the goal; 0 at the start, and also when the
    agent has broken as much as it fixed. With nothing to change (a read-only task), it is 1
    while the state is untouched and 0 once it is not.
    """
    d = diff_count(current, gold.goal_public)
    if gold.base_diff == 0:
        return 1.0 if d == 0 else 0.0
    return max(0.0, 1.0 - d / gold.base_diff)
