"""GAE: Generalized Advantage Estimation (Schulman et al., 2016, arXiv 1506.02438) with a
learned turn-level critic, for PPO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import check_unit, reverse_discounted_sum
from turngym.trainers.advantages.gae_grouped import next_in_episode
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["gae"]


def gae(turns: TurnTable | Mapping[str, Any], *, gamma: float = 0.99, lam: float = 0.95) -> np.ndarray:
    """GAE: ``A_t = Σ_k (γλ)^k δ_{t+k}``, ``δ_t = r_t + γ V_{t+1} − V_t`` from the ``value`` column.

    ``value`` is the critic's estimate for the state each turn acted in; the value after an
    episode's final turn is 0 (a truncated episode is treated as ended: append a bootstrap
    turn if you need one). λ = 1 gives the Monte-Carlo return minus ``V``; λ = 0 the TD error.
    No normalization here (PPO implementations whiten per mini-batch in the loss).

    Example: rewards (0, 1), values (0.5, 0.8), γ = 1, λ = 0.5:
    δ = (0 + 0.8 − 0.5, 1 − 0.8) = (0.3, 0.2); A = (0.3 + 0.5·0.2, 0.2):

    >>> turns = {"episode": [0, 0], "group": [0, 0], "turn": [0, 1], "reward": [0.0, 1.0], "value": [0.5, 0.8]}
    >>> gae(turns, gamma=1.0, lam=0.5).round(4).tolist()
    [0.4, 0.2]
    """
    check_unit("gamma", gamma)
    check_unit("lam", lam)
    table = as_turn_table(turns)
    table.require("gae", "value")
    value: np.ndarray = table.value  # type: ignore[assignment]
    deltas = table.reward + gamma * next_in_episode(value, table) - value
    return reverse_discounted_sum(deltas, table, gamma * lam)
