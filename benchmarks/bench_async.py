"""Asynchronous vs synchronous training, side by side: the same default run, same seeds.

Usage:
    python benchmarks/bench_async.py                         # seeds 0 1 2, one run at a time
    python benchmarks/bench_async.py --seeds 0 1 2 --jobs 6 --json
    python benchmarks/bench_async.py --variant lag2=async_lag=2,async_swap_call=2   # more async arms

Each seed trains the embedded default run (``turngym train``: the tiny model on Math-v0, GiGPO,
24 RL steps) twice, as ``turngym train --set seed=S`` and with ``--async``, each in its own
process (``--jobs`` of them at a time; with one job the arms alternate seed by seed, so a change
in the machine's load hits both). Per arm: the final success rate (mean and spread over the
seeds), the wall seconds of the whole run (process start to exit: warm start and the two
evaluations included, which async does not speed up) and of the RL loop alone (the sum of the
steps' ``step_s``), and the CPU seconds the process used (user + system: on a machine shared
with other work, a two-thread async run also gets a larger share of the cores than a one-thread
sync run, so compare the CPU seconds too). The verdict is the issue's: async reaches the synchronous final success
within its seed spread (mean ≥ sync mean − sync std) in ≥ 1.4× fewer wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np


def _train(out: Path, seed: int, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "turngym.cli", "train", "--out", str(out), "--overwrite", "--quiet", "--set", f"seed={seed}", *extra]
    t0 = time.perf_counter()
    with open(out.parent / f"{out.name}.stderr", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)} failed: see {out.parent / f'{out.name}.stderr'}")
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["phase"] == "rl"]
    return {
        "seed": seed, "wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "rl_loop_s": round(sum(r["step_s"] for r in rl), 1),
        "rollout_s": round(sum(r["rollout_s"] for r in rl), 1), "success_before": summary["success_before"],
        "success_after": summary["success_after"],
        **({"queue_wait_s": round(sum(r.get("queue_wait_s", 0.0) for r in rl), 1),
            "swap_wait_s": round(sum(r.get("swap_wait_s", 0.0) for r in rl), 1),
            "is_ratio_min": min(r.get("is_ratio_min", 1.0) for r in rl), "is_ratio_max": max(r.get("is_ratio_max", 1.0) for r in rl),
            "mixed_version_episodes": sum(r.get("mixed_version_episodes", 0) for r in rl)} if "--async" in extra else {}),
    }


_WARM = """
import sys, time
from turngym.trainers import TrainConfig, Trainer
t0 = time.perf_counter()
Trainer(TrainConfig(seed=int(sys.argv[2])), sys.argv[1] + "-run", progress=False, log=None).warm_start_only(sys.argv[1])
print(round(time.perf_counter() - t0, 1))
"""


def _warm_start(out: Path, seed: int) -> tuple[list[str], float]:
    """The default run's warm start for ``seed``, built once and shared by both arms: the
    ``--set`` fields that make an arm start RL from it exactly as the default run would (a model
    directory would otherwise mean LoRA and the system prompt), and the seconds it took."""
    proc = subprocess.run([sys.executable, "-c", _WARM, str(out), str(seed)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"the warm start of seed {seed} failed:\n{proc.stderr[-3000:]}")
    fields = [f"model={out}", "warmup_steps=0", "lora=false", "keep_system_prompt=false"]
    return [x for kv in fields for x in ("--set", kv)], float(proc.stdout.split()[-1])


def _arm(runs: list[dict[str, Any]]) -> dict[str, Any]:
    succ = np.array([r["success_after"] for r in runs])
    return {"success_mean": float(succ.mean()), "success_std": float(succ.std(ddof=1)) if len(succ) > 1 else 0.0,
            "wall_s_mean": float(np.mean([r["wall_s"] for r in runs])), "cpu_s_mean": float(np.mean([r["cpu_s"] for r in runs])),
            "rl_loop_s_mean": float(np.mean([r["rl_loop_s"] for r in runs])),
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (each async run uses two processes)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_async"))
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="TrainConfig field for both arms")
    p.add_argument("--async-set", action="append", default=[], metavar="FIELD=VALUE", help="TrainConfig field for the async arm")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FIELD=VALUE,...",
                   help="a further async arm with these TrainConfig fields (compared with sync like the async arm)")
    p.add_argument("--share-warm-start", action="store_true",
                   help="build each seed's warm start once and start both arms' RL from it (the arms' warm starts are "
                        "identical anyway; on a loaded machine this halves the benchmark); its seconds are reported apart")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    both = [x for kv in args.set for x in ("--set", kv)]
    arms = {"sync": both, "async": [*both, "--async", *(x for kv in args.async_set for x in ("--set", kv))]}
    for spec in args.variant:
        name, _, fields = spec.partition("=")
        arms[name] = [*both, "--async", *(x for kv in fields.split(",") if kv for x in ("--set", kv))]
    jobs = [(arm, seed) for seed in args.seeds for arm in arms]
    args.out.mkdir(parents=True, exist_ok=True)
    warm: dict[int, tuple[list[str], float]] = {}
    if args.share_warm_start:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            warm = dict(zip(args.seeds, pool.map(lambda seed: _warm_start(args.out / f"warm-seed{seed}", seed), args.seeds)))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = list(pool.map(lambda job: (job[0], _train(args.out / f"{job[0]}-seed{job[1]}", job[1],
                                                         [*arms[job[0]], *warm.get(job[1], ([], 0.0))[0]])), jobs))
    result: dict[str, Any] = {arm: _arm([r for a, r in done if a == arm]) for arm in arms}
    if warm:
        result["warm_start_s"] = {seed: secs for seed, (_, secs) in warm.items()}
    s = result["sync"]
    for arm in list(arms)[1:]:
        a = result[arm]
        a["speedup_wall"] = s["wall_s_mean"] / a["wall_s_mean"]
        a["speedup_rl_loop"] = s["rl_loop_s_mean"] / a["rl_loop_s_mean"]
        a["within_sync_spread"] = a["success_mean"] >= s["success_mean"] - s["success_std"]
        a["done"] = bool(a["within_sync_spread"] and a["speedup_wall"] >= 1.4)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    if warm:
        print(f"shared warm start per seed (not in the arms' wall seconds): {result['warm_start_s']} s")
    for arm in arms:
        r = result[arm]
        print(f"{arm:6s} success {r['success_mean']:.3f} ± {r['success_std']:.3f}  wall {r['wall_s_mean']:.0f} s  CPU {r['cpu_s_mean']:.0f} s  "
              f"RL loop {r['rl_loop_s_mean']:.0f} s  per seed: " + ", ".join(f"{x['success_after']:.3f}/{x['wall_s']:.0f}s" for x in r["runs"]))
        if arm != "sync":
            print(f"       speedup {r['speedup_wall']:.2f}x wall, {r['speedup_rl_loop']:.2f}x RL loop; within the sync seed spread: "
                  f"{r['within_sync_spread']}; done (>= 1.4x wall and within spread): {r['done']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
