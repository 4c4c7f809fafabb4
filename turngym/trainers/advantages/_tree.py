"""Tree statistics shared by ``tree`` and ``turn_grpo``: leaf returns and node values.

A node is one executed turn; a shared prefix is one node, whether the table lists it once or
once per episode through it (statistics use each node's canonical row). A node's
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
        parent: canonical row of the parent node (-1 when the parent is the group's root state).
        canonical: the row is its node's canonical (first) row; a node repeated on several
            rows (one per episode through it) is counted once.
        is_leaf: the row has no children.
        path_return: Σ reward from the root to this node (inclusive).
        value: mean ``path_return`` of the leaves at or below this node.
        n_leaves: number of leaves at or below this node.
    """

    parent: np.ndarray
    canonical: np.ndarray
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
    parent, node_row = table.parent_row, table.node_row
    assert parent is not None and node_row is not None, "call table.require(..., 'node', 'parent') first"
    n = table.n_rows
    canonical = node_row == np.arange(n)
    canon = np.flatnonzero(canonical)
    is_leaf = canonical.copy()
    is_leaf[parent[canon][parent[canon] >= 0]] = False
    levels = [canon[lvl][parent[canon[lvl]] >= 0] for lvl in _levels(table.turn[canon])]
    path = table.reward.copy()
    for lvl in levels:  # top-down: parents are one level up and already final
        path[lvl] += path[parent[lvl]]
    leaf_sum = np.where(is_leaf, path, 0.0)
    leaf_cnt = is_leaf.astype(np.float64)
    for lvl in reversed(levels):  # bottom-up: children are final before their parent is read
        np.add.at(leaf_sum, parent[lvl], leaf_sum[lvl])
        np.add.at(leaf_cnt, parent[lvl], leaf_cnt[lvl])
    return TreeStats(
        parent=parent,
        canonical=canonical,
        is_leaf=is_leaf[node_row],
        path_return=path[node_row],
        value=(leaf_sum / np.maximum(leaf_cnt, 1))[node_row],
        n_leaves=leaf_cnt[node_row],
    )
