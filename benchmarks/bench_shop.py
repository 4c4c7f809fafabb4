"""turngym/Shop-v0: catalog build time, memory, reset/step latency, and baseline scores.

Each difficulty runs in a fresh Python process so that build time and memory are measured
from a cold start (the catalog cache is per process):

* ``build_s`` — generating the catalog and building the BM25 index (``get_catalog``);
* ``rss_mb`` / ``peak_rss_mb`` — resident memory of the whole process (Python, numpy,
  bm25s, catalog, index) after the build, and its peak during the build; ``catalog_mb`` —
  what the build added to the resident memory;
* ``reset``, ``search``, ``click`` — per-call latency (p50 / p99, milliseconds) of
  ``env.reset``, of a ``search[...]`` step with the oracle's query (BM25 over the catalog,
  top 50, page rendering, all signals) and of ``click[...]`` steps (item pages, options);
* scores over ``--episodes`` tasks: oracle, "buy the first result" and random agents.

Goals from the issue: search step p50 < 2 ms at 10k products, < 500 MB at 100k products,
catalog build < 10 s at 10k products.

    python benchmarks/bench_shop.py [--difficulties easy medium hard] [--episodes 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Import this checkout's turngym, not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOALS = {"search_p50_ms_10k": 2.0, "rss_mb_100k": 500.0, "build_s_10k": 10.0}


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def measure(difficulty: str, episodes: int) -> dict[str, Any]:
    """Run in a fresh process: build, time the env, score the three agents."""
    import numpy as np

    import turngym
    from turngym.envs.shop.catalog import get_catalog
    from turngym.envs.shop.env import DIFFICULTIES
    from turngym.envs.shop.oracle import first_result_action

    n, density, _ = DIFFICULTIES[difficulty]
    rss_before = _rss_mb()
    t0 = time.perf_counter()
    get_catalog(0, n, density)
    build_s = time.perf_counter() - t0
    rss_after = _rss_mb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    env = turngym.make("turngym/Shop-v0", difficulty=difficulty)
    resets: list[float] = []
    searches: list[float] = []
    clicks: list[float] = []
    n_timing = min(episodes, 300)
    for seed in range(n_timing):
        t = time.perf_counter()
        env.reset(seed=seed)
        resets.append(time.perf_counter() - t)
        while True:
            action = env.oracle_action()
            t = time.perf_counter()
            *_, term, trunc, _ = env.step(action)
            (searches if action.startswith("search[") else clicks).append(time.perf_counter() - t)
            if term or trunc:
                break

    def score(policy: str) -> tuple[float, float, float]:
        rewards, steps = [], 0
        t = time.perf_counter()
        for seed in range(episodes):
            rng = np.random.default_rng(seed)
            env.reset(seed=seed)
            info: dict[str, Any] = {}
            for _ in range(env.max_turns):
                if policy == "oracle":
                    action = env.oracle_action()
                elif policy == "first_result":
                    action = first_result_action(env)
                else:
                    action = env.sample_action(rng)
                *_, term, trunc, info = env.step(action)
                steps += 1
                if term or trunc:
                    break
            rewards.append(info["outcome"]["reward"])
        r = np.array(rewards)
        return float(r.mean()), float((r >= 1.0).mean()), steps / (time.perf_counter() - t)

    scores = {name: score(name) for name in ("oracle", "first_result", "random")}
    return {
        "difficulty": difficulty,
        "n_products": n,
        "distractor_density": density,
        "build_s": build_s,
        "rss_mb": rss_after,
        "catalog_mb": rss_after - rss_before,
        "peak_rss_mb": peak,
        "reset_p50_ms": _pct(resets, 0.5),
        "search_p50_ms": _pct(searches, 0.5),
        "search_p99_ms": _pct(searches, 0.99),
        "click_p50_ms": _pct(clicks, 0.5),
        "click_p99_ms": _pct(clicks, 0.99),
        "episodes": episodes,
        **{f"{k}_reward": v[0] for k, v in scores.items()},
        **{f"{k}_success": v[1] for k, v in scores.items()},
        "oracle_steps_per_s": scores["oracle"][2],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--difficulties", nargs="+", default=["easy", "medium", "hard"])
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker, args.episodes)))
        return
    rows = []
    for d in args.difficulties:
        out = subprocess.run(
            [sys.executable, __file__, "--worker", d, "--episodes", str(args.episodes)],
            check=True, capture_output=True, text=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    by_n = {r["n_products"]: r for r in rows}
    goals = {}
    if 10_000 in by_n:
        goals["search_p50_ms_10k"] = (by_n[10_000]["search_p50_ms"], GOALS["search_p50_ms_10k"])
        goals["build_s_10k"] = (by_n[10_000]["build_s"], GOALS["build_s_10k"])
    if 100_000 in by_n:
        goals["rss_mb_100k"] = (by_n[100_000]["peak_rss_mb"], GOALS["rss_mb_100k"])
    if args.json:
        print(json.dumps({"rows": rows, "goals": {k: {"value": v, "goal": g, "met": v < g} for k, (v, g) in goals.items()}}, indent=2))
        return
    cols = [
        ("difficulty", "{}"), ("n_products", "{:,}"), ("build_s", "{:.2f}"), ("rss_mb", "{:.0f}"),
        ("catalog_mb", "{:.0f}"), ("peak_rss_mb", "{:.0f}"), ("reset_p50_ms", "{:.3f}"), ("search_p50_ms", "{:.3f}"),
        ("search_p99_ms", "{:.3f}"), ("click_p50_ms", "{:.3f}"), ("oracle_steps_per_s", "{:,.0f}"),
    ]
    print(" | ".join(c for c, _ in cols))
    for r in rows:
        print(" | ".join(f.format(r[c]) for c, f in cols))
    print()
    print(f"scores over {args.episodes} tasks (mean reward / success rate)")
    print("difficulty | oracle | first_result | random")
    for r in rows:
        print(" | ".join([r["difficulty"]] + [f"{r[f'{a}_reward']:.3f} / {r[f'{a}_success']:.3f}" for a in ("oracle", "first_result", "random")]))
    print()
    for k, (v, g) in goals.items():
        print(f"goal {k}: {v:.3f} (< {g}) {'met' if v < g else 'NOT met'}")


if __name__ == "__main__":
    main()
