"""A group's rollout tree, rebuilt from the ``node``/``parent`` ids its episodes' turns carry.

:func:`~turngym.rollout.run_tree` records every root-to-leaf path as an ordinary episode whose
turns name their tree node; paths through a shared prefix repeat the same node ids. Here those
paths are folded back into one tree: a node is one executed turn, its *value* is the mean return
of the leaves below it (the ``V(n)`` of the ``tree`` estimator), a *branch point* is a state with
more than one child. Layout is the plain tidy one: x = depth, y = leaf order (depth-first), an
inner node centred on its children.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turngym.rollout.types import Episode

__all__ = ["RolloutTree", "TreeNode", "build_tree", "is_tree"]


@dataclass
class TreeNode:
    """One executed turn of the tree (``node == -1``: the reset state, the root)."""

    node: int
    parent: int
    depth: int
    action: str = ""
    reward: float = 0.0
    valid: bool = True
    children: list[int] = field(default_factory=list)
    episodes: list[int] = field(default_factory=list)
    """Group positions of the episodes through this node."""
    leaf_returns: list[float] = field(default_factory=list)
    y: float = 0.0

    @property
    def value(self) -> float:
        return sum(self.leaf_returns) / len(self.leaf_returns) if self.leaf_returns else 0.0

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def branch(self) -> bool:
        return len(self.children) > 1


@dataclass
class RolloutTree:
    nodes: dict[int, TreeNode]
    leaves: list[int]
    """Leaf node ids in drawing order (top to bottom)."""
    depth: int


def is_tree(eps: list[Episode]) -> bool:
    """Whether the episodes share a turn (a node on two paths): a tree rollout, not G independent chains."""
    owners: dict[int, int] = {}
    for i, ep in enumerate(eps):
        for t in ep.turns:
            if t.node >= 0 and owners.setdefault(t.node, i) != i:
                return True
    return False


def build_tree(eps: list[Episode]) -> RolloutTree:
    """Fold the group's paths into one tree (turns without node ids become a private chain)."""
    root = TreeNode(-1, -2, 0)
    nodes: dict[int, TreeNode] = {-1: root}
    fresh = -2
    for i, ep in enumerate(eps):
        ret = ep.total_reward
        root.episodes.append(i)
        root.leaf_returns.append(ret)
        prev = -1
        for t in ep.turns:
            nid = t.node
            if nid < 0:  # recorded without ids: never shared
                nid, fresh = fresh - 1, fresh - 1
            n = nodes.get(nid)
            if n is None:
                n = nodes[nid] = TreeNode(nid, prev, t.index + 1, t.action, t.reward, t.action_valid)
                nodes[prev].children.append(nid)
            n.episodes.append(i)
            n.leaf_returns.append(ret)
            prev = nid
    leaves: list[int] = []

    def place(nid: int) -> float:
        n = nodes[nid]
        if not n.children:
            n.y = float(len(leaves))
            leaves.append(nid)
        else:
            ys = [place(c) for c in n.children]
            n.y = (ys[0] + ys[-1]) / 2
        return n.y

    place(-1)
    return RolloutTree(nodes, leaves, max(n.depth for n in nodes.values()))
