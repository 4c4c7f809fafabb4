"""RLOO: REINFORCE Leave-One-Out (Kool et al., 2019, "Buy 4 REINFORCE Samples, Get a Baseline
for Free!"; Ahmadian et al., 2024, "Back to Basics", arXiv 2402.14740).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import segment_stats
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["rloo"]


def rloo(turns: TurnTable | Mapping[str, Any]) -> np.ndarray:
    """RLOO: ``A = R − mean of the *other* episodes' returns in the group``, per turn.

    Equivalent to ``n/(n−1) · (R − mean_g R)`` for a group of ``n`` episodes: an unbiased
    baseline, since it never uses the episode's own return. Groups of one episode get 0.

    Example: returns 3, 1, 2 in one group: ``3 − 1.5``, ``1 − 2.5``, ``2 − 2``.

    >>> turns = {"episode": [0, 1, 2], "group": [0, 0, 0], "turn": [0, 0, 0], "reward": [3.0, 1.0, 2.0]}
    >>> rloo(turns).tolist()
    [1.5, -1.5, 0.0]
    """
    table = as_turn_table(turns)
    returns = table.episode_returns
    groups = table.episode_group
    st = segment_stats(returns, groups, n=table.n_groups)
    n = st.count[groups]
    others_mean = (st.mean[groups] * n - returns) / np.maximum(n - 1, 1)
    adv = np.where(st.live[groups], returns - others_mean, 0.0)  # lone or uniform group: exactly 0
    return adv[table.episode]
