"""PAPO: Process-Aware Policy Optimization (decoupled advantage normalization: outcome over all
responses, process only among correct ones; digest in docs/methods, seed 000 #93 / 002 #75).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import EPS, normalize_in_segments
from turngym.trainers.advantages.grpo import episode_group_advantages
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["papo"]


def papo(
    turns: TurnTable | Mapping[str, Any],
    *,
    process_weight: float = 1.0,
    success_threshold: float = 1.0,
    eps: float = EPS,
) -> np.ndarray:
    """PAPO: ``A = A_out + w · A_proc`` with decoupled normalization.

    * ``A_out``: the GRPO advantage of the episode return, normalized over *all* episodes
      of the group.
    * ``A_proc``: each turn's ``process`` score z-scored among the turns of the *correct*
      episodes of the group only; turns of incorrect episodes get 0.

    The process term can then never make a wrong episode look good (it is not compared with
    correct ones), and it keeps a learning signal when every episode of a group is correct
    and ``A_out`` collapses to 0. Correctness comes from the ``correct`` column, or, without
    it, from ``return >= success_threshold``.

    Requires the ``process`` column.

    Example: three episodes, the first two correct with process scores 0.9 and 0.5, the third
    wrong. A_out = (0.577, 0.577, −1.155); A_proc = (0.707, −0.707, 0):

    >>> turns = {"episode": [0, 1, 2], "group": [0, 0, 0], "turn": [0, 0, 0],
    ...          "reward": [1.0, 1.0, 0.0], "process": [0.9, 0.5, 0.7]}
    >>> papo(turns).round(3).tolist()
    [1.284, -0.13, -1.155]
    """
    table = as_turn_table(turns)
    table.require("papo", "process")
    outcome = episode_group_advantages(table, table.episode_returns, eps=eps)[table.episode]
    correct = table.correct if table.correct is not None else (table.episode_returns >= success_threshold)[table.episode]
    process = normalize_in_segments(table.process, table.group, eps=eps, mask=correct)  # type: ignore[arg-type]
    return outcome + process_weight * process
