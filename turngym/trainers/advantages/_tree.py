"""Tree statistics shared by ``tree`` and ``turn_grpo``: leaf returns and node values.

A tree table has one row per executed turn (node); a shared prefix appears once. A node's
*value* is the mean return of the leaves below it (itself if it is a leaf), where a leaf's
return is the sum of rewards on its root-to-leaf path. Computed level by level (a parent is
always exactly one turn above its child, which :class:`TurnTable` validates), so the cost is
O(rows) plus one NumPy call per tree depth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from turngym.trainers.advantages.table import TurnTable

__all__ = ["TreeStats", "tree_stats"]


@dataclass(frozen=True)
class TreeStats:
    """Per-row tree facts.

    Attributes:
        parent: row index of the parent (-1 when the parent is the group's root state).
        is_leaf: the row has no children.
        path_return: Σ reward from the root to this node (inclusive).
        value: mean ``path_return`` of the leaves at or below this node.
        n_leaves: number of leaves at or below this node.
    """

    parent: np.ndarray
    is_leaf: np.ndarray
    path_return: np.ndarray
    value: np.ndarray
    n_leaves: np.ndarray


def _levels(turn: np.ndarray) -> list[np.ndarray]:
    """Row indices grouped by turn (depth), shallowest first."""
    if turn.size == 0:
        return []
    small = turn.astype(np.int16) if turn.max() < np.iinfo(np.int16).max else turn
    by_turn = np.argsort(small, kind="stable")  # radix sort for 16-bit keys
    bounds = np.searchsorted(turn[by_turn], np.arange(int(turn.max()) + 2))
    return [by_turn[bounds[t] : bounds[t + 1]] for t in range(len(bounds) - 1)]


def tree_stats(table: TurnTable) -> TreeStats:
    parent = table.parent_row
    assert parent is not None, "call table.require(..., 'node', 'parent') first"
    n = table.n_rows
    is_leaf = np.ones(n, bool)
    is_leaf[parent[parent >= 0]] = False
    levels = [lvl[parent[lvl] >= 0] for lvl in _levels(table.turn)]
    path = table.reward.copy()
    for lvl in levels:  # top-down: parents are one level up and already final
        path[lvl] += path[parent[lvl]]
    leaf_sum = np.where(is_leaf, path, 0.0)
    leaf_cnt = is_leaf.astype(np.float64)
    for lvl in reversed(levels):  # bottom-up: children are final before their parent is read
        np.add.at(leaf_sum, parent[lvl], leaf_sum[lvl])
        np.add.at(leaf_cnt, parent[lvl], leaf_cnt[lvl])
    return TreeStats(parent=parent, is_leaf=is_leaf, path_return=path, value=leaf_sum / leaf_cnt, n_leaves=leaf_cnt)
