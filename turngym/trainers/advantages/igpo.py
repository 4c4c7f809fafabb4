"""IGPO: Information Gain-based Policy Optimization (Wang et al., 2025, "Information Gain-based
Policy Optimization: A Simple and Effective Approach for Multi-Turn LLM Agents", arXiv 2510.14967).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import EPS, check_unit, normalize_in_segments, reverse_discounted_sum
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["igpo", "igpo_turn_rewards"]


def igpo_turn_rewards(table: TurnTable) -> np.ndarray:
    """IGPO's dense turn reward: ``info_gain`` on non-final turns, the outcome on the final one.

    The env's own per-turn ``reward`` is added on every turn (in outcome-only envs it is 0
    before the final turn, giving exactly IGPO's reward), so shaped per-step rewards are never
    silently dropped; the final turn's info gain is not used (the outcome replaces it).
    """
    table.require("igpo", "info_gain")
    return table.reward + np.where(table.is_last, 0.0, table.info_gain)  # type: ignore[arg-type]


def igpo(turns: TurnTable | Mapping[str, Any], *, gamma: float = 1.0, eps: float = EPS) -> np.ndarray:
    """IGPO: ``A_t = Σ_{k≥t} γ^{k−t} r̂_k`` with ``r̂`` the turn rewards z-scored in the group.

    Turn reward ``r_t`` = the information gain of turn ``t`` (the change in the policy's
    probability of the gold answer across the turn, see :mod:`turngym.rewards.info_gain`) for
    non-final turns and the outcome for the final turn. All turn rewards of a group (every
    turn of every episode, intrinsic and outcome together) are normalized jointly, then
    accumulated backwards with discount γ. Dense intrinsic rewards keep a signal in groups
    whose outcomes are all equal ("advantage collapse").

    Because the turns of a group are pooled, even a group of identical episodes gets
    non-zero (identical) advantages: turns are ranked against the other turns, and the
    outcome against the gains. :func:`~turngym.trainers.advantages.igpo_turn_group.igpo_turn_group`
    compares like with like (same depth, outcomes with outcomes) and gives 0 there.

    Requires the ``info_gain`` column.

    Example: two one-question episodes of two turns; the first gains information (0.4) then
    answers right (1), the second gains nothing and answers wrong:

    >>> turns = {
    ...     "episode": [0, 0, 1, 1], "group": [0, 0, 0, 0], "turn": [0, 1, 0, 1],
    ...     "reward":  [0.0, 1.0, 0.0, 0.0], "info_gain": [0.4, 0.9, 0.0, -0.3],
    ... }
    >>> igpo(turns).round(3).tolist()    # r = (0.4, 1, 0, 0) z-scored: (0.106, 1.375, −0.741, −0.741)
    [1.481, 1.375, -1.481, -0.741]
    """
    check_unit("gamma", gamma)
    table = as_turn_table(turns)
    normalized = normalize_in_segments(igpo_turn_rewards(table), table.group, eps=eps)
    return reverse_discounted_sum(normalized, table, gamma)
