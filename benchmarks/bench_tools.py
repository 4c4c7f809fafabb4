"""Latency of the tools env: reset, and step per tool call, for BFCL and the store.

    python benchmarks/bench_tools.py            # table
    python benchmarks/bench_tools.py --json     # machine-readable
    python benchmarks/bench_tools.py --agreement  # also: agreement with BFCL's checker (~30 s)

Goals (issue 9): p50 under 1 ms per tool call, reset under 5 ms. Episodes are played by the
oracle (all gold calls of a turn in one message, then a reply), so "per call" is the time of a
call message divided by the calls in it, and "reply" is the turn-ending step with its
state check. "reset (cached)" replays a task already seen (its gold trace is cached);
"reset (new)" includes generating the store task or replaying BFCL's gold for the first time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import turngym  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _summary(xs_s: list[float]) -> dict[str, float]:
    ms = [x * 1e3 for x in xs_s]
    return {
        "n": len(ms),
        "p50_ms": _pct(ms, 0.5),
        "p90_ms": _pct(ms, 0.9),
        "p99_ms": _pct(ms, 0.99),
        "mean_ms": statistics.fmean(ms),
    }


def bench(env_id: str, tasks: list[Any] | None, episodes: int, seed: int = 0) -> dict[str, dict[str, float]]:
    env = turngym.make(env_id)
    per_call: list[float] = []
    replies: list[float] = []
    reset_new: list[float] = []
    reset_cached: list[float] = []
    for ep in range(episodes):
        options = {"task": tasks[ep % len(tasks)]} if tasks else None
        t0 = time.perf_counter()
        env.reset(seed=seed + ep, options=options)
        reset_new.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        env.reset(options={"task": env.task})
        reset_cached.append(time.perf_counter() - t0)
        while True:
            action = env.oracle_action()
            n_calls = len(json.loads(action)) if action.startswith("[") else 0
            t0 = time.perf_counter()
            *_, terminated, truncated, _ = env.step(action)
            dt = time.perf_counter() - t0
            if n_calls:
                per_call.extend([dt / n_calls] * n_calls)
            else:
                replies.append(dt)
            if terminated or truncated:
                break
    return {
        "step per tool call": _summary(per_call),
        "reply (turn check)": _summary(replies),
        "reset (new task)": _summary(reset_new),
        "reset (cached)": _summary(reset_cached),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument(
        "--agreement", action="store_true", help="also measure agreement with BFCL's checker on all 800 tasks"
    )
    args = parser.parse_args(argv)

    results: dict[str, Any] = {"store": bench("turngym/Tools-Store-v0", None, args.episodes)}
    try:
        from turngym.envs.tools.bfcl import load_bfcl_tasks

        for cat in ("base", "long_context"):
            tasks = list(load_bfcl_tasks((cat,)))
            results[f"bfcl/{cat}"] = bench("turngym/Tools-BFCL-v0", tasks, min(args.episodes, len(tasks)))
        if args.agreement:
            from turngym.envs.tools.agreement import agreement

            t0 = time.perf_counter()
            rep = agreement(turngym.make("turngym/Tools-BFCL-v0"), load_bfcl_tasks(), seed=0)
            rep["disagreements"] = [str(d) for d in rep["disagreements"]]
            rep["seconds"] = time.perf_counter() - t0
            results["agreement"] = rep
    except ImportError as exc:
        results["bfcl"] = f"skipped: {exc}"

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'source':<18}{'measure':<22}{'n':>7}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
    for source, rows in results.items():
        if source == "agreement" or not isinstance(rows, dict):
            continue
        for name, s in rows.items():
            print(
                f"{source:<18}{name:<22}{s['n']:>7}{s['p50_ms']:>10.3f}{s['p90_ms']:>10.3f}{s['p99_ms']:>10.3f}{s['mean_ms']:>10.3f}"
            )
    if "agreement" in results:
        rep = results["agreement"]
        print(f"\nagreement with BFCL multi_turn_checker over {rep['trajectories']} trajectories {rep['by_kind']}:")
        print(
            f"  episode verdict {rep['episode_agreement']:.4f}, first failing turn {rep['first_failed_turn_agreement']:.4f}; "
            f"gold passes: ours {rep['gold_pass_ours']}, BFCL {rep['gold_pass_bfcl']}; perturbed failing (BFCL) {rep['perturbed_fail_bfcl']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
