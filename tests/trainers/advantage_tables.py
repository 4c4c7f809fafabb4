"""Random turn tables for the estimator tests (imported by test_advantages*.py)."""

from __future__ import annotations

from typing import Any

import numpy as np


def random_table(seed: int, *, n_groups: int = 3, max_episodes: int = 5, max_turns: int = 5, tree: bool = False, shuffle: bool = True) -> dict[str, list[Any]]:
    """A random turn table; ``tree=True`` builds branching trees with node/parent links.

    Rewards are drawn from a few values so ties (uniform groups, equal returns) occur.
    """
    rng = np.random.default_rng(seed)
    cols: dict[str, list[Any]] = {k: [] for k in ("episode", "group", "turn", "reward", "state_before", "info_gain", "value", "process", "correct")}
    if tree:
        cols["node"], cols["parent"] = [], []
    ep_id = 0
    node_id = 100
    for g in range(n_groups):
        n_eps = int(rng.integers(1, max_episodes + 1))
        group_nodes: list[tuple[int, int]] = []  # (node, turn) of the group so far
        for _ in range(n_eps):
            start_turn, parent = 0, -1
            if tree and group_nodes and rng.random() < 0.7:
                parent, pturn = group_nodes[int(rng.integers(len(group_nodes)))]
                start_turn = pturn + 1
            length = int(rng.integers(1, max_turns + 1))
            correct = bool(rng.random() < 0.5)
            for t in range(start_turn, start_turn + length):
                cols["episode"].append(f"e{ep_id}")
                cols["group"].append(g)
                cols["turn"].append(t)
                cols["reward"].append(float(rng.choice([0.0, 0.0, 0.5, 1.0, -0.25])))
                cols["state_before"].append(f"s{int(rng.integers(3))}")
                cols["info_gain"].append(float(rng.choice([0.0, 0.1, -0.2, 0.3])))
                cols["value"].append(float(rng.normal()))
                cols["process"].append(float(rng.choice([0.2, 0.5, 0.9])))
                cols["correct"].append(correct)
                if tree:
                    cols["node"].append(node_id)
                    cols["parent"].append(parent)
                    group_nodes.append((node_id, t))
                    parent = node_id
                    node_id += 1
            ep_id += 1
    if shuffle:
        perm = rng.permutation(len(cols["episode"]))
        cols = {k: [v[i] for i in perm] for k, v in cols.items()}
    return cols


def expand_tree(cols: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The same tree, one full root-to-leaf episode per leaf (shared prefixes repeated).

    That is how :func:`turngym.rollout.to_turn_table` lays out tree rollouts.
    """
    n = len(cols["node"])
    row_of = {cols["node"][i]: i for i in range(n)}
    parents = {cols["parent"][i] for i in range(n)}
    out: dict[str, list[Any]] = {k: [] for k in cols}
    for i in range(n):
        if cols["node"][i] in parents:
            continue  # not a leaf
        path = [i]
        while cols["parent"][path[-1]] not in (-1, None):
            path.append(row_of[cols["parent"][path[-1]]])
        for j in reversed(path):
            for k in cols:
                out[k].append(cols[k][j])
            out["episode"][-1] = f"leaf{cols['node'][i]}"
    # correct is an episode flag: take the leaf's
    return out
