"""Benchmark ``turngym/Household-v0``: reset, step, snapshot/restore latency; oracle and random play.

Goals from the issue: step p50 < 50 µs and snapshot < 20 µs (a tree rollout forks constantly).
Step latency is the full ``env.step`` (parse, apply, signals, state key, admissible listing,
info dict), measured per call with ``perf_counter_ns`` under a random admissible-action
policy (the branching case) and under the oracle.

    python benchmarks/bench_household.py            # table
    python benchmarks/bench_household.py --json     # machine-readable
    python benchmarks/bench_household.py --quick    # fewer episodes
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np  # noqa: E402

from turngym.envs.household.env import HouseholdEnv  # noqa: E402
from turngym.envs.household.tasks import SPLITS, TASK_TYPES, generate_task  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def _summary(ns: list[int]) -> dict[str, float]:
    us = [x / 1000 for x in ns]
    return {"p50_us": _pct(us, 50), "p90_us": _pct(us, 90), "p99_us": _pct(us, 99), "mean_us": statistics.fmean(us), "n": len(us)}


def bench_latency(episodes: int, seed: int = 0) -> dict[str, dict[str, float]]:
    env = HouseholdEnv()
    rng = np.random.default_rng(seed)
    clock = time.perf_counter_ns
    reset_cold, reset_warm, step_random, step_oracle, snap, restore, key = [], [], [], [], [], [], []
    for ep in range(episodes):
        t0 = clock()
        env.reset(seed=seed + ep)  # a task never seen before: generate + compile
        reset_cold.append(clock() - t0)
        task = env.task
        t0 = clock()
        env.reset(options={"task": task})  # the same task again (GRPO groups): compiled world cached
        reset_warm.append(clock() - t0)
        policy_random = ep % 2 == 0
        for _ in range(env.max_turns):
            t0 = clock()
            s = env.snapshot()
            snap.append(clock() - t0)
            t0 = clock()
            env.restore(s)
            restore.append(clock() - t0)
            t0 = clock()
            env.state_key()
            key.append(clock() - t0)
            action = env.sample_action(rng) if policy_random else env.oracle_action()
            t0 = clock()
            _, _, term, trunc, _ = env.step(action)
            (step_random if policy_random else step_oracle).append(clock() - t0)
            if term or trunc:
                break
    invalid = []
    env = HouseholdEnv(max_turns=1_000_000)
    env.reset(seed=seed)
    for i in range(2000):
        action = ("take the moon", "go to cabinet 99", "put apple 1 in/on fridge 1")[i % 3]
        t0 = clock()
        env.step(action)
        invalid.append(clock() - t0)
    return {
        "reset_new_task": _summary(reset_cold),
        "reset_same_task": _summary(reset_warm),
        "step_random_admissible": _summary(step_random),
        "step_oracle": _summary(step_oracle),
        "step_invalid": _summary(invalid),
        "snapshot": _summary(snap),
        "restore": _summary(restore),
        "state_key_cached": _summary(key),
    }


def bench_policies(n: int, seed: int = 0) -> dict[str, dict[str, dict[str, float]]]:
    """Oracle success and plan length, random-admissible success, per split and task type."""
    env = HouseholdEnv()
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for split in SPLITS:
        out[split] = {}
        for tt in TASK_TYPES:
            lengths, oracle_wins, random_wins, random_gc = [], 0, 0, []
            for i in range(n):
                task = generate_task(seed + i, tt, split, 1 + i % 3)
                env.reset(options={"task": task})
                info: dict = {}
                for _ in range(env.max_turns):
                    *_, term, trunc, info = env.step(env.oracle_action())
                    if term or trunc:
                        break
                if info["outcome"]["success"]:
                    oracle_wins += 1
                    lengths.append(info["turn"])
                env.reset(options={"task": task})
                for _ in range(env.max_turns):
                    *_, term, trunc, info = env.step(env.sample_action(rng))
                    if term or trunc:
                        break
                random_wins += bool(info["outcome"]["success"])
                random_gc.append(info["outcome"]["goal_condition_rate"])
            out[split][tt] = {
                "oracle_success": oracle_wins / n,
                "oracle_mean_plan_len": statistics.fmean(lengths) if lengths else float("nan"),
                "random_success": random_wins / n,
                "random_goal_condition_rate": statistics.fmean(random_gc),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400, help="episodes for the latency benchmark")
    parser.add_argument("--tasks", type=int, default=500, help="tasks per (split, task type) for the policy table")
    parser.add_argument("--quick", action="store_true", help="100 episodes, 100 tasks")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes, args.tasks = 100, 100
    latency = bench_latency(args.episodes)
    policies = bench_policies(args.tasks)
    if args.json:
        print(json.dumps({"latency": latency, "policies": policies}, indent=2))
        return 0
    print(f"turngym/Household-v0 latency ({args.episodes} episodes, Python {sys.version.split()[0]})")
    print(f"{'operation':<24}{'p50 µs':>9}{'p90 µs':>9}{'p99 µs':>9}{'mean µs':>9}{'n':>8}")
    for name, row in latency.items():
        print(f"{name:<24}{row['p50_us']:>9.1f}{row['p90_us']:>9.1f}{row['p99_us']:>9.1f}{row['mean_us']:>9.1f}{row['n']:>8}")
    print(f"\nPolicies ({args.tasks} tasks per split and type, difficulties 1-3 cycled, max_turns 50)")
    print(f"{'split':<8}{'task type':<18}{'oracle succ':>12}{'plan len':>10}{'random succ':>13}{'random GC':>11}")
    for split, rows in policies.items():
        for tt, row in rows.items():
            print(
                f"{split:<8}{tt:<18}{row['oracle_success']:>12.1%}{row['oracle_mean_plan_len']:>10.2f}"
                f"{row['random_success']:>13.1%}{row['random_goal_condition_rate']:>11.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
