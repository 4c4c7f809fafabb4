"""Tree advantages: TreeRL (Hou et al., 2025, "TreeRL: LLM Reinforcement Learning with On-Policy
Tree Search", arXiv 2506.11902) and Tree-GRPO (Ji et al., 2025, "Tree Search for LLM Agent
Reinforcement Learning", arXiv 2509.21240).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import EPS, segment_stats
from turngym.trainers.advantages._tree import tree_stats
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["tree"]


def tree(
    turns: TurnTable | Mapping[str, Any],
    *,
    local_weight: float = 1.0,
    scale: bool = True,
    eps: float = EPS,
) -> np.ndarray:
    """Tree advantage: ``A(n) = w·[V(n) − V(parent(n))] + (V(n) − μ_g) / (σ_g + eps)``.

    ``V(n)`` is the mean return of the leaves below node ``n`` (a node = one executed turn;
    a shared prefix is one node, whether listed once or on every episode through it), ``V``
    of the root is the mean over all leaves of the group.
    ``μ_g``, ``σ_g`` are the mean and std (ddof=1) of the leaf returns of the group.

    Why this combination:

    * the **local** term ``V(n) − V(parent)`` is TreeRL's step advantage: how much choosing
      this turn changed the expected outcome relative to its branching point. It is the
      only term that separates siblings that share everything but this turn (Tree-GRPO's
      intra-tree comparison, equivalent to a step-level preference).
    * the **group** term is the episode-level GRPO advantage extended to inner nodes: since
      it is linear in the leaf returns, ``(V(n) − μ_g)/σ_g`` is exactly the mean GRPO advantage
      of the trajectories through ``n``, so a leaf gets its plain GRPO advantage and the
      root's children share it (Tree-GRPO's inter-tree term). It keeps a learning signal on
      unbranched stretches, where the local term is 0.

    Both terms are 0 when every leaf of the group has the same return. ``local_weight`` scales
    the local term (0 gives a GRPO that credits shared prefixes once); ``scale=False`` leaves
    the group term unnormalized.

    Requires the ``node`` and ``parent`` columns (``parent`` None/-1 for first turns).

    Example: a root turn ``a`` (reward 0) branches into ``b`` (reward 1) and ``c`` (reward 0);
    a second first turn ``d`` (reward 0) is its own leaf. Leaf returns 1, 0, 0, so
    V(b)=1, V(c)=0, V(a)=0.5, V(d)=0, V(root)=1/3, σ = 0.577:

    >>> turns = {
    ...     "episode": [0, 0, 1, 2], "group": [0, 0, 0, 0], "turn": [0, 1, 1, 0],
    ...     "reward":  [0.0, 1.0, 0.0, 0.0],
    ...     "node":    ["a", "b", "c", "d"], "parent": [None, "a", "a", None],
    ... }
    >>> tree(turns).round(3).tolist()
    [0.455, 1.655, -1.077, -0.911]
    """
    table = as_turn_table(turns)
    table.require("tree", "node", "parent")
    st = tree_stats(table)
    leaves = st.is_leaf & st.canonical  # each leaf once
    g = segment_stats(st.path_return[leaves], table.group[leaves], n=table.n_groups)
    live = g.live[table.group]  # ≥ 2 leaves whose returns differ; otherwise both terms are 0
    root_value = g.mean[table.group]
    parent_value = np.where(st.parent >= 0, st.value[np.maximum(st.parent, 0)], root_value)
    local = st.value - parent_value
    group_term = st.value - root_value
    if scale:
        group_term = group_term / (g.std[table.group] + eps)
    return np.where(live, local_weight * local + group_term, 0.0)
