#!/usr/bin/env python
"""A few RL steps of the old CPU recipe and the small-pretrained one from one shared warm start:
do the new options put signal into the batch? (issue 37, item 1's diagnostics per step)

The arms start from the warm start of a ``turngym study credit`` folder (``--study``, built by
:func:`turngym.study.warm.warm_start` if missing) with the study's own training configuration
(:func:`turngym.study.plan.train_config`), without evaluations, in parallel processes:

* ``old``: the study's configuration as it is (``docs/study/smollm2-rl-cpu``: groups of 4, LoRA on
  the top 8 layers, lr 1e-3, two minibatches);
* ``new``: the same with groups of 8, LoRA on every layer and linear module, dynamic sampling
  with at most two extra rounds (``--groups`` tasks per step in both arms, for the CPU's sake);
* ``new-lr3e-4``: ``new`` at the recipe's lr (``--arms new-lr3e-4 --steps 1``: its first step's approx KL).

    nice python scripts/recipe_compare.py --study docs/study/smollm2-rl-cpu --work /tmp/rc --steps 3 \\
        --out docs/study/smollm2-rl-recipe-cpu

Writes ``OUT/arms/<arm>/metrics.jsonl`` and ``OUT/compare.md`` (per step and per arm).
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

COLUMNS = ("success", "entropy", "confident_frac", "identical_group_frac", "uniform_reward_frac", "zero_adv_frac", "informative_episodes",
           "episodes", "sample_rounds", "sampled_groups", "approx_kl", "step_s")

ARMS: dict[str, dict[str, Any]] = {
    "old": {},
    "new": {"group_size": 8, "lora_layers": 0, "lora_targets": "all-linear", "dynamic_sampling": True, "dynamic_rounds": 2},
    "new-lr3e-4": {"group_size": 8, "lora_layers": 0, "lora_targets": "all-linear", "dynamic_sampling": True, "dynamic_rounds": 2, "lr": 3e-4},
}


def _study(study: Path, work: Path) -> Any:
    from turngym.study.credit import StudyConfig

    data = json.loads((study / "study_config.json").read_text())
    cfg = StudyConfig(**{k: v for k, v in data.items() if k in StudyConfig.__dataclass_fields__})
    return replace(cfg, out=work)


def run_arm(study: Path, work: Path, out: Path, arm: str, steps: int, groups: int) -> str:
    from turngym.study.plan import RunSpec, train_config
    from turngym.study.warm import warm_start
    from turngym.trainers.loop import Trainer

    cfg = _study(study, work)
    base = train_config(cfg, RunSpec("compare", "math", "gigpo", 0), steps)
    train_cfg = replace(base, model=str(warm_start(cfg, "math", 0)), warmup_steps=0, eval_episodes=0, groups_per_step=groups, threads=1,
                        **ARMS[arm])
    run = out / "arms" / arm
    t0 = time.perf_counter()
    Trainer(train_cfg, run, overwrite=True, progress=False, log=None).run()
    for heavy in ("checkpoints", "warm_start"):
        shutil.rmtree(run / heavy, ignore_errors=True)
    (run / "wall.json").write_text(json.dumps({"seconds": round(time.perf_counter() - t0, 1)}))
    return arm


def _f(v: Any) -> str:
    return "—" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def table(out: Path) -> str:
    md = ["| arm | step | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 2) + "|"]
    means = ["", "| arm | steps | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 2) + "|"]
    for arm in ARMS:
        path = out / "arms" / arm / "metrics.jsonl"
        if not path.exists():
            continue
        rl = [r for r in map(json.loads, path.read_text().splitlines()) if r.get("phase") == "rl"]
        md += [f"| {arm} | {r['step']} | " + " | ".join(_f(r.get(c)) for c in COLUMNS) + " |" for r in rl]
        means.append(f"| {arm} | {len(rl)} | " + " | ".join(_f(float(np.mean([r[c] for r in rl])) if all(c in r for r in rl) else None)
                                                       for c in COLUMNS) + " |")
    return "\n".join(md + means) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", type=Path, default=Path("docs/study/smollm2-rl-cpu"), help="the study whose configuration the arms share")
    p.add_argument("--work", type=Path, required=True, help="where the warm start is built or found (its warm/math-s0/model)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--groups", type=int, default=4, help="tasks per step in both arms")
    p.add_argument("--arms", nargs="+", default=["old", "new"], choices=list(ARMS))
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args()
    if not args.table_only:
        with ProcessPoolExecutor(len(args.arms)) as pool:
            for done in pool.map(run_arm, *zip(*[(args.study, args.work, args.out, a, args.steps, args.groups) for a in args.arms])):
                print(f"{done} done", flush=True)
    (args.out / "compare.md").write_text(table(args.out))
    print(table(args.out))


if __name__ == "__main__":
    main()
