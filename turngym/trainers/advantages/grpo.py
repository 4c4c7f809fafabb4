"""GRPO (Shao et al., 2024, "DeepSeekMath", arXiv 2402.03300) and Dr.GRPO (Liu et al., 2025,
"Understanding R1-Zero-Like Training", arXiv 2503.20783): episode-level group-relative advantages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import EPS, normalize_in_segments
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["grpo", "episode_group_advantages"]


def episode_group_advantages(table: TurnTable, values: np.ndarray, *, scale: bool = True, eps: float = EPS) -> np.ndarray:
    """Normalize one value per episode among the episodes of its group; returns per-episode."""
    return normalize_in_segments(values, table.episode_group, scale=scale, eps=eps)


def grpo(turns: TurnTable | Mapping[str, Any], *, scale: bool = True, eps: float = EPS) -> np.ndarray:
    """GRPO: ``A = (R − mean_g R) / (std_g R + eps)`` for every turn of an episode.

    ``R`` is the episode return (Σ of its turns' rewards), ``mean_g``/``std_g`` are taken over
    the episodes of its group, one value per episode (not per turn, so long episodes do not
    weigh more), ``std`` with ``ddof=1`` as in TRL and verl. The advantage is broadcast to every
    turn of the episode. ``scale=False`` is Dr.GRPO: ``A = R − mean_g R`` (no division by the
    std, which up-weights near-uniform groups). A group with a single episode, or whose
    episodes all have the same return, gets exactly 0.

    Args:
        turns: a :class:`TurnTable` or a mapping of its columns (rows in any order).
        scale: divide by the group std (GRPO) or not (Dr.GRPO).
        eps: added to the std.

    Returns:
        float64 array, one advantage per input row.

    Example: one group of two episodes with returns 1 and 0 (mean 0.5, std 0.707):

    >>> turns = {"episode": [0, 0, 1], "group": [7, 7, 7], "turn": [0, 1, 0], "reward": [0.0, 1.0, 0.0]}
    >>> grpo(turns).round(4).tolist()
    [0.7071, 0.7071, -0.7071]
    >>> grpo(turns, scale=False).tolist()
    [0.5, 0.5, -0.5]
    """
    table = as_turn_table(turns)
    return episode_group_advantages(table, table.episode_returns, scale=scale, eps=eps)[table.episode]
