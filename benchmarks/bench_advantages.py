"""Time ``compute_advantages`` on large turn tables against the plain-loop reference.

Usage:
    python benchmarks/bench_advantages.py                 # 1,100,000 rows, grpo / gigpo / tree
    python benchmarks/bench_advantages.py --rows 200000 --estimators all --json

The vectorized time includes validating and indexing the raw columns (a dict of NumPy
arrays, ids and state keys as ints), i.e. what a trainer pays per batch. gigpo is also timed
with string ids as trainers have them: ``episode`` and ``group`` uuids (one str object per
episode or group, repeated on its rows, as a trainer appends ``ep.episode_id`` per turn) and
``state_before`` hex digests (a fresh str object on every row, as an env returns them), where
turning the strings into codes dominates; its row reports ``str_vs_int``, its time over the
int-id time (``str_vs_int_cpu``: the same for CPU time, steadier on a shared machine). The
loop time runs :mod:`turngym.trainers.advantages.reference` (plain Python dicts over the same ids) on ``--loop-rows`` rows (default: all), scaled linearly to the full
size when smaller; ``speedup`` is loop time over vectorized time.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import numpy as np

from turngym.trainers.advantages import ESTIMATORS, compute_advantages
from turngym.trainers.advantages import reference as ref

TREE = {"tree", "turn_grpo"}


def chain_table(rows: int, *, group_size: int = 8, mean_len: int = 10, seed: int = 0, str_keys: bool = False) -> dict[str, np.ndarray]:
    """Groups of ``group_size`` episodes of random length (1..2·mean_len), ``rows`` rows in all.

    Ids and state keys are ints (6 states per group), or strings with ``str_keys`` (see the
    module docstring).
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 2 * mean_len, size=rows // mean_len * 2)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), rows) + 1]
    lengths[-1] -= lengths.sum() - rows
    lengths = lengths[lengths > 0]
    episode = np.repeat(np.arange(lengths.size), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    turn = np.arange(rows) - starts
    group = episode // group_size
    cols = {
        "episode": episode,
        "group": group,
        "turn": turn,
        "reward": rng.choice([0.0, 0.0, 0.0, 0.1, 1.0], size=rows),
        "state_before": group * 6 + rng.integers(0, 6, rows),
        "info_gain": rng.normal(0, 0.1, rows),
        "value": rng.normal(size=rows),
        "process": rng.random(rows),
    }
    if str_keys:
        ids = np.random.default_rng(seed + 1)  # the int table's row order stays the same
        ep_ids = [str(uuid.UUID(int=int(x))) for x in ids.integers(0, 2**63, lengths.size)]
        group_ids = [str(uuid.UUID(int=int(x))) for x in ids.integers(0, 2**63, int(group.max()) + 1)]
        cols["episode"] = np.array([ep_ids[e] for e in episode.tolist()], dtype=object)
        cols["group"] = np.array([group_ids[g] for g in group.tolist()], dtype=object)
        cols["state_before"] = np.array([f"{k * 0x9E3779B97F4A7C15 % 2**64:016x}" for k in cols["state_before"].tolist()], dtype=object)
    perm = rng.permutation(rows)
    return {k: v[perm] for k, v in cols.items()}


def tree_table(rows: int, *, leaves: int = 8, depth: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    """Tiles one random branching tree (``leaves`` paths of ``depth`` turns) over groups."""
    rng = np.random.default_rng(seed)
    t_parent, t_turn, t_ep = [], [], []
    for e in range(leaves):
        if e == 0:
            start, parent = 0, -1
        else:
            parent = int(rng.integers(len(t_parent)))
            start = t_turn[parent] + 1
            if start >= depth:
                parent, start = -1, 0
        for t in range(start, depth):
            t_parent.append(parent)
            t_turn.append(t)
            t_ep.append(e)
            parent = len(t_parent) - 1
    size = len(t_parent)
    n_groups = -(-rows // size)
    offset = np.repeat(np.arange(n_groups) * size, size)
    parent = np.tile(np.array(t_parent), n_groups)
    parent = np.where(parent >= 0, parent + offset, -1)
    cols = {
        "episode": np.tile(np.array(t_ep), n_groups) + np.repeat(np.arange(n_groups) * leaves, size),
        "group": np.repeat(np.arange(n_groups), size),
        "turn": np.tile(np.array(t_turn), n_groups),
        "node": np.arange(n_groups * size),
        "parent": parent,
        "reward": rng.choice([0.0, 0.0, 0.1, 1.0], size=n_groups * size),
    }
    # Nodes are numbered in creation order (parents first), so a prefix cut keeps every parent.
    return {k: v[:rows] for k, v in cols.items()}


def _time(fn, repeat: int) -> float:
    return _times(fn, repeat)[0]


def _times(fn, repeat: int) -> tuple[float, float]:
    """Best wall-clock and best CPU (process) time over ``repeat`` runs; on a shared machine
    the CPU time is the steadier of the two."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_100_000)
    p.add_argument("--loop-rows", type=int, default=None, help="rows for the plain-loop timing (default: --rows)")
    p.add_argument("--estimators", default="grpo,gigpo,tree", help="comma list or 'all'")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    names = sorted(ESTIMATORS) if args.estimators == "all" else args.estimators.split(",")
    if "gigpo" in names:
        names.insert(names.index("gigpo") + 1, "gigpo:str")
    loop_rows = args.loop_rows or args.rows
    chain, tree = chain_table(args.rows), tree_table(args.rows)
    results: list[dict] = []
    for label in names:
        name, _, variant = label.partition(":")
        str_keys = variant == "str"
        cols = tree if name in TREE else (chain_table(args.rows, str_keys=True) if str_keys else chain)
        fast, fast_cpu = _times(lambda n=name, c=cols: compute_advantages(n, c), args.repeat)
        sub = tree_table(loop_rows) if name in TREE else chain_table(loop_rows, str_keys=str_keys)
        lists = {k: v.tolist() for k, v in sub.items()}
        loop = _time(lambda n=name, c=lists: ref.REFERENCE[n](c), 1) * args.rows / loop_rows
        check = {k: v[:2000] for k, v in (tree_table(2000) if name in TREE else chain_table(2000)).items()}
        np.testing.assert_allclose(compute_advantages(name, check), ref.REFERENCE[name]({k: v.tolist() for k, v in check.items()}), atol=1e-8)
        row = {"estimator": name + (" (str ids)" if str_keys else ""), "rows": args.rows, "vectorized_s": round(fast, 4), "vectorized_cpu_s": round(fast_cpu, 4), "loop_s": round(loop, 2), "speedup": round(loop / fast, 1)}
        if str_keys:
            np.testing.assert_allclose(compute_advantages(name, cols), compute_advantages(name, chain))  # same table, other ids
            ints = next(r for r in results if r["estimator"] == name)
            row["str_vs_int"] = round(fast / ints["vectorized_s"], 2)
            row["str_vs_int_cpu"] = round(fast_cpu / ints["vectorized_cpu_s"], 2)
        results.append(row)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'estimator':<26}{'rows':>10}{'vectorized s':>14}{'plain loop s':>14}{'speedup':>9}{'str/int':>9}")
    for r in results:
        ratio = f"{r['str_vs_int']:>8.2f}x" if "str_vs_int" in r else ""
        print(f"{r['estimator']:<26}{r['rows']:>10,}{r['vectorized_s']:>14.3f}{r['loop_s']:>14.2f}{r['speedup']:>8.1f}x{ratio}")
    if loop_rows != args.rows:
        print(f"(plain loop timed on {loop_rows:,} rows, scaled linearly)")


if __name__ == "__main__":
    main()
