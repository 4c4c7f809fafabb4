"""Agreement with BFCL's own checker: play a call trajectory in our env and in BFCL's.

A *trajectory* is, per user turn, a list of steps, each a list of calls
(``{"name", "arguments"}``) — BFCL's ``multi_turn_model_result_list_decoded`` shape. We play it
in :class:`~turngym.envs.tools.env.ToolsEnv` (each step one message of calls, then a reply
ending the turn) and read our per-turn ``turn_passed`` verdicts; we render the same calls as
Python call strings and run BFCL's ``multi_turn_checker`` on them (this is the one place BFCL's
``eval``-based executor runs, on strings we rendered from literals). BFCL stops at the first
failing turn, so the comparison is the episode verdict and the first failing turn.

:func:`perturb` makes the trajectories the issue asks for: the gold calls with one call
dropped, two calls of a turn swapped, one argument altered, one call repeated, or the first call
after a turn with empty gold (BFCL's miss_param / miss_func turns) made one turn early.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turngym.envs.tools.tasks import ToolsTask

__all__ = [
    "Trajectory",
    "Verdict",
    "gold_trajectory",
    "perturb",
    "render_call",
    "play_ours",
    "play_bfcl",
    "PERTURBATIONS",
    "agreement",
]

Trajectory = list[list[list[dict[str, Any]]]]
PERTURBATIONS = ("drop", "swap", "alter", "duplicate", "early")
_counter = itertools.count()
_TURN_IN_MESSAGE = re.compile(r"for turn (\d+)")


@dataclass(frozen=True)
class Verdict:
    """An episode verdict: passed, and the first failing user turn (None if passed)."""

    passed: bool
    first_failed: int | None


def gold_trajectory(task: ToolsTask) -> Trajectory:
    """The gold calls as a trajectory: one step per turn with calls, none for empty turns."""
    return [[[dict(c) for c in turn]] if turn else [] for turn in task.gold]


def render_call(call: dict[str, Any]) -> str:
    """A Python call string BFCL's executor accepts (arguments as literals).

    >>> render_call({"name": "mv", "arguments": {"source": "a.txt", "destination": "tmp"}})
    "mv(source='a.txt', destination='tmp')"
    """
    args = ", ".join(f"{k}={v!r}" for k, v in call["arguments"].items())
    return f"{call['name']}({args})"


def _alter_value(value: Any, rng: np.random.Generator) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + int(rng.integers(1, 5))
    if isinstance(value, float):
        return value + float(rng.integers(1, 5))
    if isinstance(value, str):
        return value + "_x" if value else "x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return None


def perturb(task: ToolsTask, kind: str, rng: np.random.Generator) -> Trajectory | None:
    """The gold trajectory with one perturbation of ``kind``; None if the task has no place for it."""
    traj = gold_trajectory(task)
    turns = [k for k, t in enumerate(traj) if t]
    if kind == "early":  # act in a turn whose gold is empty, before the user supplied what was missing
        turns = [k for k in range(len(traj) - 1) if not traj[k] and traj[k + 1]]
        if not turns:
            return None
        k = turns[int(rng.integers(len(turns)))]
        moved = traj[k + 1][0].pop(0)
        traj[k] = [[moved]]
        if not traj[k + 1][0]:
            traj[k + 1] = []
        return traj
    if kind == "swap":
        turns = [k for k in turns if any(a != b for a, b in itertools.pairwise(traj[k][0]))]
    elif kind == "alter":
        turns = [k for k in turns if any(c["arguments"] for c in traj[k][0])]
    if not turns:
        return None
    k = turns[int(rng.integers(len(turns)))]
    calls = traj[k][0]
    if kind == "drop":
        calls.pop(int(rng.integers(len(calls))))
        traj[k] = [calls] if calls else []
    elif kind == "swap":
        pairs = [i for i in range(len(calls) - 1) if calls[i] != calls[i + 1]]
        i = pairs[int(rng.integers(len(pairs)))]
        calls[i], calls[i + 1] = calls[i + 1], calls[i]
    elif kind == "duplicate":
        i = int(rng.integers(len(calls)))
        calls.insert(i + 1, copy.deepcopy(calls[i]))
    elif kind == "alter":
        options = [i for i, c in enumerate(calls) if c["arguments"]]
        i = options[int(rng.integers(len(options)))]
        call = copy.deepcopy(calls[i])
        name = sorted(call["arguments"])[int(rng.integers(len(call["arguments"])))]
        call["arguments"][name] = _alter_value(call["arguments"][name], rng)
        calls[i] = call
    else:
        raise ValueError(f"unknown perturbation {kind!r}; expected one of {PERTURBATIONS}")
    return traj


def play_ours(env: Any, task: ToolsTask, trajectory: Trajectory) -> tuple[Verdict, list[bool]]:
    """Play ``trajectory`` in our env; the verdict and every turn's ``turn_passed``."""
    env.reset(options={"task": task})
    verdicts: list[bool] = []
    for steps in trajectory:
        for calls in steps:
            env.step(json.dumps(calls))
        _, _, terminated, truncated, info = env.step("Done.")
        verdicts.append(info["signals"]["turn_passed"] == 1.0)
        if terminated or truncated:
            break
    first = next((i for i, ok in enumerate(verdicts) if not ok), None)
    return Verdict(first is None, first), verdicts


def play_bfcl(task: ToolsTask, trajectory: Trajectory) -> Verdict:
    """Run BFCL's own ``multi_turn_checker`` on the trajectory (rendered as call strings)."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    from turngym.envs.tools.bfcl import restored_process_state

    model = f"turngym_agreement_{next(_counter)}"
    entry = {
        "id": task.meta["bfcl_id"],
        "initial_config": copy.deepcopy(dict(task.initial)),
        "involved_classes": list(task.classes),
    }
    decoded = [[[render_call(c) for c in step] for step in steps] for steps in trajectory]
    truth = [[render_call(c) for c in turn] for turn in task.gold]
    try:
        with restored_process_state(task.classes):  # BFCL's harness changes defaults and globals (issue 31)
            result = multi_turn_checker(decoded, truth, entry, task.category, model)
    finally:  # BFCL caches instances in its module globals under the model name
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model)]:
            del vars(multi_turn_utils)[key]
    if result["valid"]:
        return Verdict(True, None)
    m = _TURN_IN_MESSAGE.search(result.get("error_message", ""))
    if m is not None:
        return Verdict(False, int(m.group(1)))
    return Verdict(False, len(result["execution_result"]) - 1)  # state mismatch: the last turn run


def agreement(
    env: Any, tasks: Sequence[ToolsTask], *, seed: int = 0, kinds: Sequence[str] = PERTURBATIONS
) -> dict[str, Any]:
    """Play the gold and each perturbation of every task in both checkers; count agreements.

    Returns counts, the episode-verdict agreement rate, the first-failing-turn agreement rate,
    whether every gold replay passed both, and the disagreeing cases.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for task in tasks:
        cases = [("gold", gold_trajectory(task))]
        for kind in kinds:
            traj = perturb(task, kind, rng)
            if traj is not None:
                cases.append((kind, traj))
        for kind, traj in cases:
            ours, _ = play_ours(env, task, traj)
            theirs = play_bfcl(task, traj)
            rows.append((task.id, kind, ours, theirs))
    n = len(rows)
    episode = sum(o.passed == t.passed for _, _, o, t in rows)
    first = sum(o == t for _, _, o, t in rows)
    gold_rows = [(o, t) for _, k, o, t in rows if k == "gold"]
    return {
        "trajectories": n,
        "by_kind": {k: sum(1 for r in rows if r[1] == k) for k in ("gold", *kinds)},
        "episode_agreement": episode / n if n else 1.0,
        "first_failed_turn_agreement": first / n if n else 1.0,
        "gold_pass_ours": sum(o.passed for o, _ in gold_rows),
        "gold_pass_bfcl": sum(t.passed for _, t in gold_rows),
        "perturbed_fail_bfcl": sum(not t.passed for _, k, _, t in rows if k != "gold"),
        "disagreements": [(tid, k, o, t) for tid, k, o, t in rows if o != t],
    }
