"""A²TGPO: Agentic Turn-Group Policy Optimization (turn-group normalization of information
gain with variance-rescaled discounted accumulation; digest in docs/methods, seed 002 #68).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import (
    EPS,
    check_unit,
    combine_codes,
    normalize_in_segments,
    reverse_discounted_sum,
)
from turngym.trainers.advantages.igpo import igpo_turn_rewards
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["igpo_turn_group"]


def igpo_turn_group(turns: TurnTable | Mapping[str, Any], *, gamma: float = 1.0, eps: float = EPS) -> np.ndarray:
    """A²TGPO: ``A_t = (Σ_{k≥t} γ^{k−t} r̂_k) / √(T − t)`` with turn-group normalized ``r̂``.

    Turn rewards are IGPO's (information gain on non-final turns, the outcome on the final
    turn). Each non-final turn's reward is z-scored within its *turn group*: the non-final
    turns of the same ``group`` at the same turn index. The final turns (the outcomes) are
    z-scored among the final turns of the group, i.e. among all episodes, whatever their
    length. The normalized rewards are accumulated backwards with discount γ and the sum is
    divided by √(number of accumulated terms), so long tails do not inflate the variance.

    Why the outcome is kept out of the turn-index groups: when the agent decides when to stop,
    comparing one episode's *final outcome* with another's *intermediate information gain* at
    the same index is an action-dependent baseline (verl RFC #7244): with outcomes below the
    usual gains it pays to keep talking, above them it pays to stop. Keeping outcomes with
    outcomes and gains with gains at the same depth removes that bias: a constant per-turn gain
    and an equal outcome give every turn exactly 0, however many turns an episode took.

    The paper's third part, adaptive turn-level clipping, belongs to the loss (the clip range
    per turn), not to the advantage.

    Requires the ``info_gain`` column.

    Example: two 2-turn episodes; IG 0.4 then success, IG 0 then failure. Turn group 0 and
    the outcomes both z-score to ±0.7071, so turn 0 gets (0.7071 + 0.7071)/√2 = 1:

    >>> turns = {
    ...     "episode": [0, 0, 1, 1], "group": [0, 0, 0, 0], "turn": [0, 1, 0, 1],
    ...     "reward":  [0.0, 1.0, 0.0, 0.0], "info_gain": [0.4, 0.0, 0.0, 0.0],
    ... }
    >>> igpo_turn_group(turns).round(4).tolist()
    [1.0, 0.7071, -1.0, -0.7071]
    """
    check_unit("gamma", gamma)
    table = as_turn_table(turns)
    rewards = igpo_turn_rewards(table)
    last = table.is_last
    depth = np.where(last, int(table.turn.max(initial=0)) + 1, table.turn)  # finals form their own bucket
    normalized = normalize_in_segments(rewards, combine_codes(table.group, depth), eps=eps)
    return reverse_discounted_sum(normalized, table, gamma) / np.sqrt(table.steps_to_end + 1.0)
