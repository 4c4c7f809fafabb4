"""Turn-level GRPO: group-relative advantages among K continuations branched from one snapshot
(SLATE, "truncated step-level sampling", arXiv 2510.04695; TL-GRPO / Tree-GRPO intra-tree groups).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import EPS, combine_codes, normalize_in_segments
from turngym.trainers.advantages._tree import tree_stats
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["turn_grpo"]


def turn_grpo(turns: TurnTable | Mapping[str, Any], *, scale: bool = True, eps: float = EPS) -> np.ndarray:
    """Turn-level GRPO: ``A(n) = (V(n) − mean_sib V) / (std_sib V + eps)`` among siblings.

    Siblings are the turns taken from the same snapshot: rows of the same ``group`` with the
    same ``parent`` (the K continuations a rollout branched from one state; first turns share
    the group's initial state). ``V(n)`` is the mean return of the leaves below ``n`` (for a
    continuation that was not branched again: the return of that continuation). Because
    siblings share their whole prefix, the comparison isolates the one turn that differs
    (SLATE's ×T variance reduction). A turn with no sibling, or whose siblings all lead to the
    same value, gets 0. ``scale=False`` drops the std division.

    Requires the ``node`` and ``parent`` columns.

    Example: a shared first turn ``a``, then three continuations from its snapshot with
    returns 1, 0 and 0.5:

    >>> turns = {
    ...     "episode": [0, 0, 1, 2], "group": [0, 0, 0, 0], "turn": [0, 1, 1, 1],
    ...     "reward":  [0.0, 1.0, 0.0, 0.5],
    ...     "node":    [1, 2, 3, 4], "parent": [-1, 1, 1, 1],
    ... }
    >>> turn_grpo(turns).round(4).tolist()
    [0.0, 1.0, -1.0, 0.0]
    """
    table = as_turn_table(turns)
    table.require("turn_grpo", "node", "parent")
    st = tree_stats(table)
    siblings = combine_codes(table.group, st.parent + 1)
    adv = normalize_in_segments(st.value, siblings, scale=scale, eps=eps, mask=st.canonical)  # each node once
    return adv[table.node_row]
