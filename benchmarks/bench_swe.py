"""SWE env latency and agent baselines.

Reports reset latency, the latency of a ``run_tests`` step (uncached: a fresh edit each time),
the hidden evaluation's grading time per task (uncached, on the gold-patched tree; split grader,
and the in-process runner for comparison), task-generation
throughput, and the resolve rate of the oracle, a do-nothing agent (one harmless edit, then
submit: graded) and an agent that edits random lines, over ``--tasks`` shipped tasks.

    python benchmarks/bench_swe.py [--tasks 200] [--no-generation] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import numpy as np


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-generation", action="store_true", help="skip the task-generation throughput (minutes on 2 cores)")
    args = ap.parse_args()

    from turngym.agents import OracleAgent
    from turngym.envs.swe.env import SWEEnv
    from turngym.envs.swe.tasks import generate_tasks, load_tasks
    from turngym.envs.swe.testing import run_pytest
    from turngym.rollout import run_episodes

    tasks = load_tasks()
    sample = random.Random(0).sample(tasks, min(args.tasks, len(tasks)))
    env = SWEEnv(tasks=sample)
    out: dict[str, object] = {"tasks": len(sample)}

    resets = []
    for t in sample[:50]:
        s = time.perf_counter()
        env.reset(options={"task": t})
        resets.append(time.perf_counter() - s)
    out["reset_ms_p50"] = pct(resets, 50)

    # Every step below changes the tree first (a unique marker file), so nothing is cached:
    # an edit step runs the hidden evaluation (the whole suite); run_tests of the F2P tests
    # afterwards reads their verdicts from that run (no second pytest).
    edits, runs = [], []
    for i, t in enumerate(sample[:30]):
        env.reset(options={"task": t})
        marker = f"# bench {i} {time.time()}\n"
        s = time.perf_counter()
        env.step(json.dumps({"name": "create_file", "arguments": {"path": "bench_marker.py", "content": marker}}))
        edits.append(time.perf_counter() - s)
        s = time.perf_counter()
        env.step(json.dumps({"name": "run_tests", "arguments": {"tests": list(t.fail_to_pass)}}))
        runs.append(time.perf_counter() - s)
    out["edit_step_ms_p50 (hidden eval)"] = pct(edits, 50)
    out["run_tests_step_ms_p50"] = pct(runs, 50)
    out["run_tests_step_ms_p99"] = pct(runs, 99)

    # Grading one task: the hidden evaluation of a never-seen tree (gold patch + a unique marker)
    from turngym.envs.swe.verifier import measure

    grades = []
    for i, t in enumerate(sample[:20]):
        fixed = env.gold_tree(t).with_file("bench_marker.py", f"# grade {i} {time.time()}\n")
        s = time.perf_counter()
        progress = measure(t, fixed, env.start_tree(t))
        grades.append(time.perf_counter() - s)
        assert progress.resolved, (t.id, progress)
    out["grade_ms_p50"] = pct(grades, 50)
    out["grade_ms_p90"] = pct(grades, 90)

    # The same grading with pytest beside the code (the in-process runner SWE-bench instances
    # use, and generated tasks used before the split grader): what the split design costs
    from turngym.envs.swe.grading import grading_tree

    inproc = []
    for i, t in enumerate(sample[:20]):
        fixed = env.gold_tree(t).with_file("bench_marker.py", f"# inproc {i} {time.time()}\n")
        s = time.perf_counter()
        run_pytest(grading_tree(t, fixed, env.start_tree(t)), None, canary=True)
        inproc.append(time.perf_counter() - s)
    out["grade_inprocess_ms_p50"] = pct(inproc, 50)
    out["grade_inprocess_ms_p90"] = pct(inproc, 90)

    if not args.no_generation:
        s = time.perf_counter()
        gen = generate_tasks(["lrucache"], seed=123)
        el = time.perf_counter() - s
        out["generation_tasks_per_s"] = len(gen) / el

    t0 = time.perf_counter()
    eps = run_episodes(lambda: env, OracleAgent(), list(range(len(sample))), batch_size=1, tasks=sample)
    out["oracle_resolved"] = sum(e.success for e in eps) / len(eps)
    out["oracle_mean_turns"] = statistics.mean(len(e.turns) for e in eps)
    out["oracle_s_per_episode"] = (time.perf_counter() - t0) / len(eps)

    nothing = 0
    for t in sample:
        env.reset(options={"task": t})
        noop = {"name": "create_file", "arguments": {"path": "NOTES.md", "content": "no change\n"}}
        *_, info = env.step(json.dumps([noop, {"name": "submit", "arguments": {}}]))
        nothing += info["outcome"]["success"]
    out["do_nothing_resolved"] = nothing / len(sample)

    from turngym.envs.swe.env import random_line_edit

    rng = np.random.default_rng(0)
    wins = 0
    n_rand = min(50, len(sample))
    for t in sample[:n_rand]:
        env.reset(options={"task": t})
        src = [p for p in env.state.tree if p.endswith(".py") and not p.startswith("tests/")]
        env.step(random_line_edit(env.state.tree, src[0], rng))
        *_, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
        wins += info["outcome"]["success"]
    out["random_line_edit_resolved"] = wins / n_rand
    out["pytest_cache_entries"] = len(run_pytest.__globals__["_CACHE"])
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:<32} {v:.3f}" if isinstance(v, float) else f"{k:<32} {v}")


if __name__ == "__main__":
    main()
