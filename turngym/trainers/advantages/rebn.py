"""ReBN: REINFORCE with Return Batch Normalization (GEM, Liu et al., 2025, "GEM: A Gym for
Agentic LLMs", arXiv 2510.01051).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import EPS, check_unit, discounted_returns, normalize_in_segments
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["rebn"]


def rebn(turns: TurnTable | Mapping[str, Any], *, gamma: float = 1.0, eps: float = EPS) -> np.ndarray:
    """ReBN: per-turn discounted return ``G_t = r_t + γ G_{t+1}``, normalized over the batch.

    ``A_t = (G_t − mean G) / (std G + eps)`` with mean and std over *all rows of the batch*
    (no group baseline, no critic), which is what makes it usable with dense per-turn rewards
    and any γ. GEM uses γ=1 by default and 0.9 for games.

    Args:
        gamma: discount γ in [0, 1].
        eps: added to the std.

    Example: one episode with rewards 0, 1 and γ=0.5 gives G = (0.5, 1); a second gives G = (0,):

    >>> turns = {"episode": [0, 0, 1], "group": [0, 0, 0], "turn": [0, 1, 0], "reward": [0.0, 1.0, 0.0]}
    >>> rebn(turns, gamma=0.5).round(4).tolist()
    [0.0, 1.0, -1.0]
    """
    check_unit("gamma", gamma)
    table = as_turn_table(turns)
    returns = discounted_returns(table, gamma)
    return normalize_in_segments(returns, np.zeros(table.n_rows, np.int64), eps=eps)
