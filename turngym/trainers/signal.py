"""How much learning signal an RL batch carries: the diagnostics of issue 37's item 1.

A group-relative estimator (GRPO, GiGPO) learns only from the differences between the episodes of
a group. A nearly deterministic policy plays the same episode ``group_size`` times, every member
gets the same reward, the advantages are all 0 and the step changes nothing. These numbers tell
that apart from a step-size or capacity limit, every RL step, from the rollout alone:

- ``entropy``: mean ``−log p`` of the sampled action tokens under the distribution that sampled
  them (the rollout's recorded log-probs, temperature and constrained decoding included). Its
  expectation *is* the mean per-token entropy of the sampling distribution at the visited
  positions (``E_x[−log p(x)] = H(p)``), so it is an unbiased estimate that costs nothing: no
  vocabulary-wide softmax, no extra forward pass.
- ``confident_frac``: share of the sampled tokens whose probability exceeded 0.99.
- ``identical_group_frac``: share of the groups whose members played the same actions, turn for turn.
- ``uniform_reward_frac``: share of the groups whose members' returns are all equal (no
  episode-level signal: DAPO's dynamic sampling drops them).
- ``informative_episodes``: episodes in the other groups.

Episodes are grouped by ``Episode.group`` (an episode without one is a group of its own, which is
never informative).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["CONFIDENT_P", "batch_signal", "group_episodes", "is_informative", "is_identical"]

CONFIDENT_P = 0.99
"""A sampled token above this probability counts in ``confident_frac``."""


def group_episodes(episodes: Sequence[Any]) -> list[list[Any]]:
    """The episodes by group, in order of first appearance."""
    groups: dict[str, list[Any]] = {}
    for ep in episodes:
        groups.setdefault(ep.group or ep.episode_id, []).append(ep)
    return list(groups.values())


def is_informative(group: Sequence[Any], tol: float = 1e-9) -> bool:
    """True when the members' returns differ (a group-relative baseline leaves some advantage)."""
    returns = [float(ep.total_reward) for ep in group]
    return len(returns) > 1 and max(returns) - min(returns) > tol


def _actions(ep: Any) -> tuple[Any, ...]:
    return tuple(tuple(t.token_ids) if t.token_ids is not None else t.action for t in ep.turns)


def is_identical(group: Sequence[Any]) -> bool:
    """True when every member of a group of two or more played the same actions (token ids where recorded)."""
    return len(group) > 1 and len({_actions(ep) for ep in group}) == 1


def batch_signal(episodes: Sequence[Any]) -> dict[str, Any]:
    """The signal metrics of a batch of episodes (see the module docstring); NaN where undefined."""
    logps = [lp for ep in episodes for t in ep.turns for lp in (t.logprobs or ())]
    groups = [g for g in group_episodes(episodes) if len(g) > 1]
    informative = [g for g in groups if is_informative(g)]
    nan = float("nan")
    return {
        "entropy": float(-sum(logps) / len(logps)) if logps else nan,
        "confident_frac": float(sum(lp > math.log(CONFIDENT_P) for lp in logps) / len(logps)) if logps else nan,
        "identical_group_frac": float(sum(map(is_identical, groups)) / len(groups)) if groups else nan,
        "uniform_reward_frac": float(1 - len(informative) / len(groups)) if groups else nan,
        "informative_episodes": int(sum(len(g) for g in informative)),
    }
