"""Cost and quality of the learned critic: PPO + GAE (shared head, separate trunk) vs critic-free GiGPO.

Usage:
    python benchmarks/bench_critic.py                    # household, 6 RL steps per arm
    python benchmarks/bench_critic.py --env math --steps 4 --json

One warm start (imitation of noisy oracle demonstrations, the credit study's env preset), then
the same RL run — same seed, tasks, batch and update — once per arm: ``gigpo`` (no critic),
``gae`` with the ``shared`` value head, ``gae`` with the ``separate`` trunk. Per arm: the mean
wall seconds of an RL step (rollout + update) and of its update alone (``step_s − rollout_s``),
each as a ratio to GiGPO's, and the critic's explained variance against the Monte-Carlo
returns (second half of the steps). Runs one after the other in this process, so a machine
whose load changes during the benchmark shifts the ratios: rerun on a quiet machine to compare.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ARMS = (("gigpo", {"algo": "gigpo", "algo_params": {"gamma": 0.95}}),
        ("gae_shared", {"algo": "gae", "critic": "shared", "algo_params": {"gamma": 0.95, "lam": 0.95}}),
        ("gae_separate", {"algo": "gae", "critic": "separate", "algo_params": {"gamma": 0.95, "lam": 0.95}}))


def run(env: str, steps: int, seed: int, groups: int, group_size: int, warmup_steps: int | None = None) -> dict[str, Any]:
    from turngym.study.credit import ENV_PRESETS, RunSpec, StudyConfig, _train_config
    from turngym.trainers.loop import Trainer

    preset = ENV_PRESETS[env]
    study = StudyConfig(envs=(env,), groups_per_step=groups, group_size=group_size, eval_episodes=0)
    base = replace(_train_config(study, RunSpec("bench", env, "grpo", seed), steps), eval_episodes=0)
    if warmup_steps is not None:  # a shorter warm start: the cost per step hardly depends on how good the policy is
        base = replace(base, warmup_steps=warmup_steps)
    out: dict[str, Any] = {"env": preset.env_id, "steps": steps, "seed": seed, "episodes_per_step": groups * group_size, "arms": {}}
    with tempfile.TemporaryDirectory() as tmp:
        warm = Trainer(base, Path(tmp) / "warm", progress=False, log=None).warm_start_only(Path(tmp) / "warm-model")
        for name, over in ARMS:
            cfg = replace(base, model=str(warm), warmup_steps=0, **over)
            print(f"{name}: {steps} RL steps", file=sys.stderr)
            Trainer(cfg, Path(tmp) / name, progress=True, log=None).run()
            rows = [json.loads(x) for x in (Path(tmp) / name / "metrics.jsonl").read_text().splitlines()]
            rl = [r for r in rows if r.get("phase") == "rl"]
            late = rl[len(rl) // 2 :]
            out["arms"][name] = {
                "step_s": float(np.mean([r["step_s"] for r in rl])),
                "update_s": float(np.mean([r["step_s"] - r["rollout_s"] for r in rl])),
                "critic_ev_mc": float(np.mean([r["critic_ev_mc"] for r in late])) if "critic_ev_mc" in rl[0] else None,
                "critic_ev": float(np.mean([r["critic_ev"] for r in late])) if "critic_ev" in rl[0] else None,
            }
    ref = out["arms"]["gigpo"]
    for arm in out["arms"].values():
        arm["step_ratio_vs_gigpo"] = arm["step_s"] / ref["step_s"]
        arm["update_ratio_vs_gigpo"] = arm["update_s"] / ref["update_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="household", help="a credit-study env preset (household, shop, math, search)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--warmup-steps", type=int, default=None, help="imitation steps of the warm start (default: the study's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = run(args.env, args.steps, args.seed, args.groups, args.group_size, args.warmup_steps)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{res['env']}: {res['steps']} RL steps of {res['episodes_per_step']} episodes per arm, seed {res['seed']}")
    print(f"{'arm':<14}{'s/step':>9}{'× GiGPO':>9}{'update s':>10}{'× GiGPO':>9}{'EV (MC)':>9}")
    for name, a in res["arms"].items():
        ev = f"{a['critic_ev_mc']:.2f}" if a["critic_ev_mc"] is not None else "—"
        print(f"{name:<14}{a['step_s']:>9.2f}{a['step_ratio_vs_gigpo']:>9.2f}{a['update_s']:>10.2f}{a['update_ratio_vs_gigpo']:>9.2f}{ev:>9}")


if __name__ == "__main__":
    main()
