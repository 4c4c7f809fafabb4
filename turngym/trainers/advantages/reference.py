"""Plain-Python reference implementations of every estimator: the readable spec.

Each function loops over dicts exactly as the formula in its vectorized twin's docstring
reads. They are slow (they are the "plain loop" of ``benchmarks/bench_advantages.py``) and
exist so the tests can check the vectorized estimators against them on random tables.
They take the same mapping of columns and return a list of floats aligned with the rows.

>>> turns = {"episode": [0, 0, 1], "group": [0, 0, 0], "turn": [0, 1, 0], "reward": [0.0, 1.0, 0.0]}
>>> [round(a, 4) for a in grpo(turns)]
[0.7071, 0.7071, -0.7071]
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

__all__ = ["REFERENCE", "grpo", "rloo", "rebn", "gigpo", "turn_grpo", "tree", "igpo", "igpo_turn_group", "gae_grouped", "gae", "papo"]

EPS = 1e-6


def _rows(turns: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    n = len(turns["episode"])
    return [{k: v[i] for k, v in turns.items()} for i in range(n)]


def _zscore(values: dict[Any, float], *, scale: bool = True, eps: float = EPS) -> dict[Any, float]:
    """Normalize a bucket: (x − mean)/(std_ddof1 + eps); 0 if < 2 members or all equal."""
    xs = list(values.values())
    if len(xs) < 2 or max(xs) == min(xs):
        return {k: 0.0 for k in values}
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    return {k: (x - mean) / (std + eps) if scale else x - mean for k, x in values.items()}


def _episodes(rows: list[dict[str, Any]]) -> dict[Hashable, list[int]]:
    """Row indices of each episode, in turn order."""
    eps: dict[Hashable, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        eps[r["episode"]].append(i)
    for idx in eps.values():
        idx.sort(key=lambda i: rows[i]["turn"])
    return eps


def _returns_to_go(rows: list[dict[str, Any]], rewards: list[float], gamma: float) -> list[float]:
    out = [0.0] * len(rows)
    for idx in _episodes(rows).values():
        g = 0.0
        for i in reversed(idx):
            g = rewards[i] + gamma * g
            out[i] = g
    return out


def _group_of_episode(rows: list[dict[str, Any]]) -> dict[Hashable, Hashable]:
    return {r["episode"]: r["group"] for r in rows}


def _episode_grpo(rows: list[dict[str, Any]], ep_values: dict[Hashable, float], *, scale: bool = True) -> dict[Hashable, float]:
    by_group: dict[Hashable, dict[Hashable, float]] = defaultdict(dict)
    for ep, g in _group_of_episode(rows).items():
        by_group[g][ep] = ep_values[ep]
    out: dict[Hashable, float] = {}
    for bucket in by_group.values():
        out.update(_zscore(bucket, scale=scale))
    return out


def _episode_returns(rows: list[dict[str, Any]]) -> dict[Hashable, float]:
    ret: dict[Hashable, float] = defaultdict(float)
    for r in rows:
        ret[r["episode"]] += r["reward"]
    return ret


def grpo(turns: Mapping[str, Sequence[Any]], *, scale: bool = True) -> list[float]:
    rows = _rows(turns)
    adv = _episode_grpo(rows, _episode_returns(rows), scale=scale)
    return [adv[r["episode"]] for r in rows]


def rloo(turns: Mapping[str, Sequence[Any]]) -> list[float]:
    rows = _rows(turns)
    ret = _episode_returns(rows)
    members: dict[Hashable, list[Hashable]] = defaultdict(list)
    for ep, g in _group_of_episode(rows).items():
        members[g].append(ep)
    adv = {}
    for eps in members.values():
        for ep in eps:
            others = [ret[o] for o in eps if o != ep]
            adv[ep] = ret[ep] - sum(others) / len(others) if others else 0.0
    return [adv[r["episode"]] for r in rows]


def rebn(turns: Mapping[str, Sequence[Any]], *, gamma: float = 1.0) -> list[float]:
    rows = _rows(turns)
    g = _returns_to_go(rows, [r["reward"] for r in rows], gamma)
    z = _zscore(dict(enumerate(g)))
    return [z[i] for i in range(len(rows))]


def gigpo(turns: Mapping[str, Sequence[Any]], *, gamma: float = 0.95, omega: float = 1.0, normalize: str = "std") -> list[float]:
    rows = _rows(turns)
    scale = normalize == "std"
    ep_adv = _episode_grpo(rows, _episode_returns(rows), scale=scale)
    g = _returns_to_go(rows, [r["reward"] for r in rows], gamma)
    buckets: dict[tuple[Hashable, Hashable], dict[int, float]] = defaultdict(dict)
    for i, r in enumerate(rows):
        buckets[(r["group"], r["state_before"])][i] = g[i]
    step_adv: dict[int, float] = {}
    for b in buckets.values():
        step_adv.update(_zscore(b, scale=scale))
    return [ep_adv[r["episode"]] + omega * step_adv[i] for i, r in enumerate(rows)]


def _is_root(p: Any) -> bool:
    return p is None or p == -1


def _tree_values(rows: list[dict[str, Any]]) -> tuple[list[float], list[float], list[bool], list[int]]:
    """(value, path_return, is_leaf, canonical row) per row, by explicit recursion over children.

    A node listed on several rows (once per episode through it) is one node: its first row.
    """
    row_of: dict[Any, int] = {}
    for i, r in enumerate(rows):
        row_of.setdefault(r["node"], i)
    canon = [row_of[r["node"]] for r in rows]
    children: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if canon[i] == i and not _is_root(r["parent"]):
            children[row_of[r["parent"]]].append(i)

    def path_return(i: int) -> float:
        total = 0.0
        while True:
            total += rows[i]["reward"]
            p = rows[i]["parent"]
            if _is_root(p):
                return total
            i = row_of[p]

    def leaves(i: int) -> list[int]:
        if not children[i]:
            return [i]
        return [leaf for c in children[i] for leaf in leaves(c)]

    paths = [path_return(c) for c in canon]
    values = []
    for c in canon:
        ls = leaves(c)
        values.append(sum(paths[leaf] for leaf in ls) / len(ls))
    return values, paths, [not children[c] for c in canon], canon


def turn_grpo(turns: Mapping[str, Sequence[Any]], *, scale: bool = True) -> list[float]:
    rows = _rows(turns)
    values, _, _, canon = _tree_values(rows)
    buckets: dict[tuple[Hashable, Hashable], dict[int, float]] = defaultdict(dict)
    for i, r in enumerate(rows):
        if canon[i] == i:
            buckets[(r["group"], None if _is_root(r["parent"]) else r["parent"])][i] = values[i]
    adv: dict[int, float] = {}
    for b in buckets.values():
        adv.update(_zscore(b, scale=scale))
    return [adv[canon[i]] for i in range(len(rows))]


def tree(turns: Mapping[str, Sequence[Any]], *, local_weight: float = 1.0, scale: bool = True) -> list[float]:
    rows = _rows(turns)
    values, paths, is_leaf, canon = _tree_values(rows)
    row_of = {r["node"]: canon[i] for i, r in enumerate(rows)}
    leaf_returns: dict[Hashable, list[float]] = defaultdict(list)
    for i, r in enumerate(rows):
        if is_leaf[i] and canon[i] == i:
            leaf_returns[r["group"]].append(paths[i])
    out = []
    for i, r in enumerate(rows):
        xs = leaf_returns[r["group"]]
        if len(xs) < 2 or max(xs) == min(xs):
            out.append(0.0)
            continue
        mu = sum(xs) / len(xs)
        sigma = math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - 1))
        parent_value = mu if _is_root(r["parent"]) else values[row_of[r["parent"]]]
        group_term = (values[i] - mu) / (sigma + EPS) if scale else values[i] - mu
        out.append(local_weight * (values[i] - parent_value) + group_term)
    return out


def _igpo_rewards(rows: list[dict[str, Any]]) -> list[float]:
    last = {}
    for ep, idx in _episodes(rows).items():
        last[ep] = idx[-1]
    return [r["reward"] + (0.0 if last[r["episode"]] == i else r["info_gain"]) for i, r in enumerate(rows)]


def igpo(turns: Mapping[str, Sequence[Any]], *, gamma: float = 1.0) -> list[float]:
    rows = _rows(turns)
    rewards = _igpo_rewards(rows)
    buckets: dict[Hashable, dict[int, float]] = defaultdict(dict)
    for i, r in enumerate(rows):
        buckets[r["group"]][i] = rewards[i]
    z: dict[int, float] = {}
    for b in buckets.values():
        z.update(_zscore(b))
    return _returns_to_go(rows, [z[i] for i in range(len(rows))], gamma)


def igpo_turn_group(turns: Mapping[str, Sequence[Any]], *, gamma: float = 1.0) -> list[float]:
    rows = _rows(turns)
    rewards = _igpo_rewards(rows)
    episodes = _episodes(rows)
    last = {idx[-1] for idx in episodes.values()}
    buckets: dict[tuple[Hashable, Any], dict[int, float]] = defaultdict(dict)
    for i, r in enumerate(rows):
        buckets[(r["group"], "final" if i in last else r["turn"])][i] = rewards[i]
    z: dict[int, float] = {}
    for b in buckets.values():
        z.update(_zscore(b))
    out = [0.0] * len(rows)
    for idx in episodes.values():
        for k, i in enumerate(idx):
            tail = idx[k:]
            out[i] = sum(gamma**j * z[t] for j, t in enumerate(tail)) / math.sqrt(len(tail))
    return out


def _next_values(rows: list[dict[str, Any]], values: list[float]) -> list[float]:
    nxt = [0.0] * len(rows)
    for idx in _episodes(rows).values():
        for a, b in zip(idx, idx[1:]):
            nxt[a] = values[b]
    return nxt


def _gae(rows: list[dict[str, Any]], values: list[float], gamma: float, lam: float) -> list[float]:
    nxt = _next_values(rows, values)
    out = [0.0] * len(rows)
    for idx in _episodes(rows).values():
        a = 0.0
        for i in reversed(idx):
            delta = rows[i]["reward"] + gamma * nxt[i] - values[i]
            a = delta + gamma * lam * a
            out[i] = a
    return out


def gae(turns: Mapping[str, Sequence[Any]], *, gamma: float = 0.99, lam: float = 0.95) -> list[float]:
    rows = _rows(turns)
    return _gae(rows, [r["value"] for r in rows], gamma, lam)


def gae_grouped(turns: Mapping[str, Sequence[Any]], *, gamma: float = 0.95, lam: float = 0.95, normalize: bool = True) -> list[float]:
    rows = _rows(turns)
    g = _returns_to_go(rows, [r["reward"] for r in rows], gamma)
    by_state: dict[Any, list[float]] = defaultdict(list)
    by_turn: dict[Any, list[float]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_turn[(r["group"], r["turn"])].append(g[i])
        if "state_before" in r:
            by_state[(r["group"], r["state_before"])].append(g[i])
    values = []
    for r in rows:
        same_state = by_state.get((r["group"], r.get("state_before")), [])
        pool = same_state if len(same_state) >= 2 else by_turn[(r["group"], r["turn"])]
        values.append(sum(pool) / len(pool))
    adv = _gae(rows, values, gamma, lam)
    if not normalize:
        return adv
    buckets: dict[Hashable, dict[int, float]] = defaultdict(dict)
    for i, r in enumerate(rows):
        buckets[r["group"]][i] = adv[i]
    z: dict[int, float] = {}
    for b in buckets.values():
        z.update(_zscore(b))
    return [z[i] for i in range(len(rows))]


def papo(turns: Mapping[str, Sequence[Any]], *, process_weight: float = 1.0, success_threshold: float = 1.0) -> list[float]:
    rows = _rows(turns)
    ret = _episode_returns(rows)
    out_adv = _episode_grpo(rows, ret)
    buckets: dict[Hashable, dict[int, float]] = defaultdict(dict)
    for i, r in enumerate(rows):
        correct = bool(r["correct"]) if "correct" in r else ret[r["episode"]] >= success_threshold
        if correct:
            buckets[r["group"]][i] = r["process"]
    proc: dict[int, float] = {}
    for b in buckets.values():
        proc.update(_zscore(b))
    return [out_adv[r["episode"]] + process_weight * proc.get(i, 0.0) for i, r in enumerate(rows)]


REFERENCE = {
    "grpo": grpo,
    "rloo": rloo,
    "rebn": rebn,
    "gigpo": gigpo,
    "turn_grpo": turn_grpo,
    "tree": tree,
    "igpo": igpo,
    "igpo_turn_group": igpo_turn_group,
    "gae_grouped": gae_grouped,
    "gae": gae,
    "papo": papo,
}
