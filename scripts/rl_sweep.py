#!/usr/bin/env python
"""A short RL learning-rate sweep from a ``turngym study credit`` folder's shared warm start.

Why: a flat RL phase has two opposite explanations (the update is too small to move the policy,
or too large and it collapses), and the per-step movement metrics tell them apart: ``approx_kl``
and ``ratio_std`` (from :func:`turngym.trainers.losses.policy_movement`, non-zero only when a step
has more than one minibatch), ``clip_frac``, ``grad_norm``, ``zero_adv_frac``. Each learning rate
is one run of ``--steps`` RL steps with the study's own training configuration
(:func:`turngym.study.plan.train_config`: same model, env, groups, LoRA) from the same warm
start, without evaluations (training success is in every step's row); the runs go in parallel.

    python scripts/rl_sweep.py --study docs/study/smollm2-rl-cpu --lrs 2e-4 1e-3 3e-3 \\
        --set minibatches=2 --steps 6 --jobs 3

Writes ``STUDY/sweep/lr-<lr>/metrics.jsonl`` (+ the run's config) per lr and ``STUDY/sweep/sweep.md``
(the table, one row per lr and step, then a per-lr summary) from those files alone; ``--table-only``
rewrites the table without training.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

COLUMNS = ("success", "approx_kl", "ratio_std", "clip_frac", "grad_norm", "zero_adv_frac", "adv_abs_mean", "entropy", "confident_frac",
           "uniform_reward_frac", "step_s")


def _study_config(study: Path) -> Any:
    from turngym.study.credit import StudyConfig

    data = json.loads((study / "study_config.json").read_text())
    return StudyConfig(**{k: v for k, v in data.items() if k in StudyConfig.__dataclass_fields__})


def run_lr(study: Path, env: str, algo: str, lr: float, steps: int, seed: int, overrides: dict[str, Any]) -> str:
    """One sweep run: the study's training config for ``(env, algo, seed)`` from its warm start, at ``lr``."""
    from turngym.study.plan import RunSpec, train_config
    from turngym.study.warm import warm_start
    from turngym.trainers.loop import Trainer

    cfg = _study_config(study)
    out = study / "sweep" / f"lr-{lr:g}"
    train_cfg = replace(train_config(cfg, RunSpec("sweep", env, algo, seed), steps), model=str(warm_start(cfg, env, seed)),
                        warmup_steps=0, eval_episodes=0, lr=lr, **overrides)
    t0 = time.perf_counter()
    Trainer(train_cfg, out, overwrite=True, progress=False, log=None).run()
    for heavy in ("checkpoints", "warm_start"):  # weights are not part of the evidence
        shutil.rmtree(out / heavy, ignore_errors=True)
    (out / "wall.json").write_text(json.dumps({"seconds": round(time.perf_counter() - t0, 1)}))
    return str(out)


def table(study: Path) -> str:
    """The sweep's markdown table from ``STUDY/sweep/lr-*/metrics.jsonl``."""
    runs = sorted((study / "sweep").glob("lr-*/metrics.jsonl"), key=lambda p: float(p.parent.name[3:]))
    head = "| lr | step | " + " | ".join(COLUMNS) + " |\n|" + "---|" * (len(COLUMNS) + 2) + "\n"
    rows, summary = [], []
    for path in runs:
        lr = path.parent.name[3:]
        rl = [json.loads(x) for x in path.read_text().splitlines() if '"phase": "rl"' in x]
        for r in rl:
            rows.append(f"| {lr} | {r['step']} | " + " | ".join(_fmt(r.get(c)) for c in COLUMNS) + " |")
        if rl:
            mean = {c: float(np.mean([r[c] for r in rl if c in r])) for c in COLUMNS if any(c in r for r in rl)}
            summary.append(f"| {lr} | mean of {len(rl)} | " + " | ".join(_fmt(mean.get(c)) for c in COLUMNS) + " |")
    return head + "\n".join(rows) + "\n\n" + head + "\n".join(summary) + "\n"


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.2e}" if 0 < abs(v) < 1e-2 else f"{v:.3f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", type=Path, required=True, help="a study folder whose warm start (warm/<env>-s<seed>/model) exists")
    p.add_argument("--env", default="math")
    p.add_argument("--algo", default="gigpo")
    p.add_argument("--lrs", type=float, nargs="+", default=[2e-4, 1e-3, 3e-3])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="TrainConfig fields for every run (e.g. minibatches=2)")
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args()
    if not args.table_only:
        from turngym.cli_args import parse_kv

        overrides = parse_kv(args.set, flag="--set")
        import multiprocessing as mp

        with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
            futs = [pool.submit(run_lr, args.study, args.env, args.algo, lr, args.steps, args.seed, overrides) for lr in args.lrs]
            for f in futs:
                print(f"done: {f.result()}", flush=True)
    text = table(args.study)
    (args.study / "sweep" / "sweep.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
