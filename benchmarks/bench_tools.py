"""Latency of the tools env: reset, and step per tool call, for BFCL and the store.

    python benchmarks/bench_tools.py            # table
    python benchmarks/bench_tools.py --json     # machine-readable
    python benchmarks/bench_tools.py --agreement  # also: agreement with BFCL's checker (~30 s)
    python benchmarks/bench_tools.py --isolation  # only: what isolating BFCL calls costs (issue 31)

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


def bench_isolation(categories: tuple[str, ...] = ("base", "long_context")) -> dict[str, dict[str, float]]:
    """What BFCL's process-state isolation costs (issue 31), against the bare call it wraps.

    Every gold call of every task, once through :meth:`BfclBackend.call` (fresh defaults, the
    lock, the decimal context, mpmath's precision, written globals) and once the way calls ran
    before: ``method(**deepcopy(arguments))`` and the result's text. Also ``create`` with and
    without the pickle copy that detaches a scenario from the module's globals.
    """
    import copy

    from turngym.envs.tools.backend import format_result
    from turngym.envs.tools.bfcl import BfclBackend, _backend_class, load_bfcl_tasks

    guarded: list[float] = []
    bare: list[float] = []
    create: list[float] = []
    create_bare: list[float] = []
    for task in load_bfcl_tasks(categories):
        t0 = time.perf_counter()
        backend = BfclBackend.create(task)
        create.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        instances = {}
        for name in task.classes:
            inst = _backend_class(name)()
            if hasattr(inst, "_load_scenario") and name != "MathAPI":
                inst._load_scenario(copy.deepcopy(task.initial.get(name, {})), long_context="long_context" in task.category)
            instances[name] = inst
        create_bare.append(time.perf_counter() - t0)
        other = BfclBackend(instances, backend._owners)
        for turn in task.gold:
            for call in turn:
                t0 = time.perf_counter()
                backend.call(call["name"], call["arguments"])
                guarded.append(time.perf_counter() - t0)
                method = getattr(other.instances[other._owners[call["name"]]], call["name"])
                t0 = time.perf_counter()
                try:
                    format_result(method(**copy.deepcopy(dict(call["arguments"]))))
                except Exception:  # noqa: BLE001 - timing only, as the backend's call does
                    pass
                bare.append(time.perf_counter() - t0)
    return {
        "call, isolated": _summary(guarded),
        "call, bare": _summary(bare),
        "create, detached": _summary(create),
        "create, bare": _summary(create_bare),
    }


def _bench_envs(episodes: int, with_agreement: bool) -> dict[str, Any]:
    results: dict[str, Any] = {"store": bench("turngym/Tools-Store-v0", None, episodes)}
    try:
        from turngym.envs.tools.bfcl import load_bfcl_tasks

        for cat in ("base", "long_context"):
            tasks = list(load_bfcl_tasks((cat,)))
            results[f"bfcl/{cat}"] = bench("turngym/Tools-BFCL-v0", tasks, min(episodes, len(tasks)))
        if with_agreement:
            from turngym.envs.tools.agreement import agreement

            t0 = time.perf_counter()
            rep = agreement(turngym.make("turngym/Tools-BFCL-v0"), load_bfcl_tasks(), seed=0)
            rep["disagreements"] = [str(d) for d in rep["disagreements"]]
            rep["seconds"] = time.perf_counter() - t0
            results["agreement"] = rep
    except ImportError as exc:
        results["bfcl"] = f"skipped: {exc}"
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument(
        "--agreement", action="store_true", help="also measure agreement with BFCL's checker on all 800 tasks"
    )
    parser.add_argument("--isolation", action="store_true", help="only measure what isolating BFCL calls costs")
    args = parser.parse_args(argv)

    if args.isolation:
        results: dict[str, Any] = {"bfcl isolation": bench_isolation()}
    else:
        results = _bench_envs(args.episodes, args.agreement)

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
