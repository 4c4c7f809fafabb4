"""``turngym study credit``: the credit-assignment claims of the literature, in miniature.

One command trains every (claim, env, algo, seed) run with the *same* model, warm start
(imitation of noisy oracle demonstrations, seeded by the run's seed, so the algorithms of a
seed start from identical weights), env-step budget and hyper-parameters — only the advantage
estimator (or, for claim 4, the shaping guard) differs — then evaluates each policy on the
training task pool and on held-out tasks (the unseen split where the env has one), runs the
training-free variance study (claim 2), and writes ``OUT/report.md`` from the metrics files
alone (:mod:`turngym.study.report`).

Claims (a section of the report each):

1. ``gigpo_vs_grpo`` — GiGPO vs GRPO on household and shop (``--envs`` / ``--algos``).
2. ``variance`` — advantage variance against a Monte Carlo truth (:mod:`turngym.study.variance`).
3. ``papo`` — PAPO vs outcome-only GRPO on Math once groups become all-correct.
4. ``farming`` — a repeatable shaped signal (``tool_ok``, paid per calculator call) with and
   without the bounded-shaping guard.
5. ``info_gain`` — IGPO vs GRPO on multi-hop SearchQA, success by hop count.
6. ``critic`` — PPO with a learned turn-level critic (GAE over turns; the shared value head and
   the separate critic) vs GRPO vs GiGPO on household: do group statistics replace a critic?
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError
from turngym.study.plan import CLAIMS, RunSpec, StudyConfig, plan_runs, run_model, steps_for, train_config
from turngym.study.presets import ENV_PRESETS
from turngym.study.warm import (
    episode_stats,
    prepare_warm_start,
    same_heldout,
    warm_ready,
    warm_start,
    warm_start_dir,
    warm_start_evals,
)
from turngym.trainers.atomic import write_text

__all__ = ["CLAIMS", "ENV_PRESETS", "RunSpec", "StudyConfig", "plan_runs", "run_one", "run_study", "warm_start", "warm_start_dir",
           "warm_start_evals"]

def run_one(cfg: StudyConfig, spec: RunSpec, steps: int) -> dict[str, Any]:
    """Train one run from its (env, seed)'s shared warm start, evaluate it on the pool and on
    held-out tasks; write ``study.json``."""
    from turngym.trainers.loop import Trainer

    out = cfg.out / "runs" / spec.name
    preset = ENV_PRESETS[spec.env]
    train_cfg = replace(train_config(cfg, spec, steps), model=str(warm_start(cfg, spec.env, spec.seed)), warmup_steps=0)
    known = warm_start_evals(cfg, spec.env, spec.seed) if cfg.pretrained else {}
    t0 = time.perf_counter()
    resume = _unfinished(out, train_cfg)  # exactly from its newest checkpoint; any other run without study.json is redone
    trainer = Trainer(train_cfg, out, resume=resume, overwrite=not resume, progress=cfg.progress, log=None,
                      success_before=known.get("warm_eval"))
    result = trainer.run()
    # the pool evaluation of the trained policy (the trainer's final one), with its episodes
    pool = episode_stats(trainer.last_eval_episodes, preset.env_id, train_cfg.env_kwargs)
    # held out: the unseen split, or fresh task seeds of the same env
    heldout_id = preset.heldout_env_id or preset.env_id
    if same_heldout(cfg, spec.env, train_cfg):
        held = pool
    else:
        trainer.evaluate(cfg.heldout_episodes, env_id=heldout_id)
        held = episode_stats(trainer.last_eval_episodes, heldout_id, train_cfg.env_kwargs)
    record = {
        "name": spec.name, "claim": spec.claim, "env": spec.env, "env_id": preset.env_id, "heldout_env_id": heldout_id,
        "algo": spec.algo, "arm": spec.arm, "seed": spec.seed, "steps": steps,
        "success_before": result.success_before, "success_after": result.success_after,
        "pool_eval": pool, "heldout_eval": held, "seconds": round(time.perf_counter() - t0, 1),
        "warm_start": str(warm_start_dir(cfg, spec.env, spec.seed)), "train_config": train_cfg.to_dict(),
        **({"heldout_before": known["warm_heldout"], "heldout_base": known.get("base_heldout")} if known else {}),
    }
    write_text(out / "study.json", json.dumps(record, indent=1, default=str))  # atomic: it marks the run done
    for heavy in ("checkpoints", "warm_start"):  # weights are not part of the evidence
        shutil.rmtree(out / heavy, ignore_errors=True)
    return record


def _unfinished(out: Path, train_cfg: Any) -> bool:
    """Whether ``out`` holds an unfinished run of exactly ``train_cfg`` (a study stopped mid-run):
    it then continues from its newest checkpoint instead of starting over."""
    from turngym.trainers.config import TrainConfig

    path = out / "config.json"
    if (out / "study.json").exists() or not path.exists():
        return False
    try:
        return TrainConfig.load(path).to_dict() == train_cfg.to_dict()
    except (ValueError, TypeError, OSError):
        return False


def _call(fn_args: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any:
    fn, args = fn_args
    return fn(*args)


Job = tuple[Callable[..., Any], tuple[Any, ...]]


def _pipeline(first: dict[Any, Job], then: dict[Any, list[Job]], jobs: int) -> Iterator[tuple[str, Any, Any]]:
    """Run ``first[key]``, then the jobs of ``then[key]`` (those of a key without a ``first`` at
    once); yields ``("first" | "then", key, result)`` in order of completion. With ``jobs > 1``
    in ``jobs`` spawned processes (one torch thread each), and a key's jobs are queued the moment
    its ``first`` is done — not when every key's is: a short warm start's runs use the cores while
    a long one still trains. In this process, in order, with ``jobs == 1``."""
    if jobs == 1:
        for key in dict.fromkeys([*first, *then]):
            if key in first:
                fn, args = first[key]
                yield "first", key, fn(*args)
            for fn, args in then.get(key, []):
                yield "then", key, fn(*args)
        return
    import multiprocessing as mp

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        pending: dict[Any, tuple[str, Any]] = {pool.submit(_call, job): ("first", key) for key, job in first.items()}

        def start(key: Any) -> None:
            pending.update({pool.submit(_call, job): ("then", key) for job in then.get(key, [])})

        for key in then:
            if key not in first:
                start(key)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=list(pending).index):  # submission order among the finished
                kind, key = pending.pop(fut)
                result = fut.result()
                if kind == "first":
                    start(key)
                yield kind, key, result


def run_study(cfg: StudyConfig, *, log: Callable[[str], None] = print) -> Path:
    """Run every selected claim and write ``OUT/report.md``; returns its path."""
    from turngym.study.report import write_report
    from turngym.study.variance import VarianceConfig, run_variance_study

    t0 = time.perf_counter()
    cfg.out.mkdir(parents=True, exist_ok=True)
    write_text(cfg.out / "study_config.json", json.dumps(cfg.to_dict(), indent=1))
    if "variance" in cfg.claims:
        vcfg = VarianceConfig.quick() if cfg.quick else VarianceConfig()
        vpath = cfg.out / "variance.json"
        wanted = json.loads(json.dumps({**vcfg.__dict__, "branching": list(vcfg.branching)}))
        if vpath.exists() and json.loads(vpath.read_text()).get("config") == wanted:  # deterministic: the same config gives the same file
            log(f"claim 2 (variance): {vpath} holds this configuration's results: skipping it")
        else:
            log(f"claim 2 (variance): {vcfg.tasks} tasks x {vcfg.repeats} rollouts, MC {vcfg.mc}, critic fitted for {vcfg.critic_steps} minibatches")
            res = run_variance_study(vcfg)
            write_text(vpath, json.dumps(res, indent=1))
            log(f"  done in {res['seconds']} s")
    runs = plan_runs(cfg)
    if runs:  # build (or find) the shared tiny model once, before parallel runs race to build it
        log(f"model: {run_model(cfg)}")
    steps = {}
    for env in sorted({r.env for r in runs}):
        steps[env], mean_len = steps_for(cfg, ENV_PRESETS[env])
        log(f"{env}: demonstrator episodes last {mean_len:.1f} turns -> {steps[env]} RL iterations for {cfg.budget} env steps")
    todo = [r for r in runs if not (cfg.out / "runs" / r.name / "study.json").exists()]
    if len(todo) < len(runs):
        log(f"{len(runs) - len(todo)} of {len(runs)} runs already done (their study.json exists): skipping them")
    warm = sorted({(r.env, cfg.warm_seed(r.seed)) for r in todo if not warm_ready(cfg, r.env, r.seed)})
    log(f"{len(warm)} warm starts (one per env and seed, shared by its arms), then {len(todo)} training runs, {cfg.jobs} at a time")
    # Parallel runs would race to build (and evaluate) a shared warm start, so with --jobs each is built
    # first, and its runs start as soon as it is ready (one at a time builds each when first needed).
    first = {key: (prepare_warm_start, (cfg, *key)) for key in warm} if cfg.jobs > 1 else {}
    then: dict[tuple[str, int], list[Job]] = {}
    for spec in todo:
        then.setdefault((spec.env, cfg.warm_seed(spec.seed)), []).append((run_one, (cfg, spec, steps[spec.env])))
    i = 0
    for kind, _key, rec in _pipeline(first, then, cfg.jobs):
        if kind == "first":
            log(f"warm start ready: {rec}")
            continue
        i += 1
        log(f"[{i}/{len(todo)}] {rec['name']}: {rec['success_before']:.2f} -> {rec['success_after']:.2f} (held out {rec['heldout_eval']['success']:.2f}), {rec['seconds']:.0f} s")
    for model in cfg.out.glob("warm/*/model"):  # weights are not evidence; a re-run recreates them exactly
        shutil.rmtree(model, ignore_errors=True)
    wall = time.perf_counter() - t0
    prev = cfg.out / "wall.json"
    total = wall + (json.loads(prev.read_text())["seconds"] if prev.exists() and len(todo) < len(runs) else 0.0)
    write_text(prev, json.dumps({"seconds": round(total, 1)}))
    report = write_report(cfg.out, command=regenerate_command(cfg))
    log(f"report: {report} ({total:.0f} s)")
    return report


def regenerate_command(cfg: StudyConfig) -> str:
    """The exact command line that reproduces ``cfg`` (every option spelled out)."""
    parts = ["turngym", "study", "credit", "--envs", *cfg.envs, "--algos", *cfg.algos, "--claims", *cfg.claims,
             "--seeds", str(cfg.seeds), "--budget", str(cfg.budget), "--jobs", str(cfg.jobs), "--out", str(cfg.out)]
    if list(cfg.critic_envs) != ["household"]:
        parts += ["--critic-envs", *cfg.critic_envs]
    if cfg.quick:
        parts.append("--quick")
    if cfg.pretrained:  # every field the pretrained defaults set, spelled out
        parts += ["--model", cfg.model]
        for name in ("task_pool", "groups_per_step", "group_size", "warmup_steps", "demo_episodes", "eval_episodes", "heldout_episodes",
                     "base_episodes", "lr", "lora_layers", "threads", "shared_warm_start", "train_overrides"):
            parts += ["--set", f"{name}={json.dumps(getattr(cfg, name), separators=(',', ':'))}"]
    return " ".join(shlex.quote(p) for p in parts)


def setup_parser(parser: Any) -> None:
    """Add ``credit`` (and its options) under ``turngym study``."""
    sub = parser.add_subparsers(dest="study", required=True, metavar="STUDY")
    c = sub.add_parser("credit", help="the credit-assignment claims (GiGPO, turn/tree baselines, PAPO, bounded shaping, IGPO)")
    c.add_argument("--envs", nargs="+", choices=sorted(ENV_PRESETS), help="envs of the GiGPO-vs-GRPO grid (default: household shop)")
    c.add_argument("--algos", nargs="+", help="estimators of the GiGPO-vs-GRPO grid (default: gigpo grpo)")
    c.add_argument("--claims", nargs="+", choices=CLAIMS, help="claims to run (default: all)")
    c.add_argument("--critic-envs", nargs="+", choices=sorted(ENV_PRESETS), help="envs of claim 6, the learned critic (default: household)")
    c.add_argument("--seeds", type=int, help="seeds per (env, algo) (default 3; --quick: 1)")
    c.add_argument("--budget", type=int, help="RL env steps per run (default 6000; --quick: 64)")
    c.add_argument("--out", default=None, help="output directory (default runs/study; --quick: runs/study-quick)")
    c.add_argument("--jobs", type=int, default=1, help="training runs in parallel (processes of 1 torch thread each)")
    c.add_argument("--quick", action="store_true", help="CI smoke test: every claim at a tiny scale (1-2 min on 2 CPU cores)")
    c.add_argument("--report-to", metavar="BACKENDS", help="mirror every training run's metrics to tensorboard and/or wandb, comma-separated")
    c.add_argument("--model", help="tiny (default: the study's 0.5M-parameter model, trained in full) or a pretrained model: smollm2 or a "
                   "model directory (LoRA; defaults sized for a 2-core CPU: StudyConfig.pretrained_config)")
    c.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="any StudyConfig field (e.g. task_pool=0, lora_layers=8)")
    c.add_argument("--report-only", action="store_true", help="rewrite OUT/report.md, summary.json and the plots from OUT's metrics files; train nothing")


def config_from_args(args: Any) -> StudyConfig:
    kw: dict[str, Any] = {"envs": args.envs, "algos": args.algos, "claims": args.claims, "seeds": args.seeds,
                          "budget": args.budget, "jobs": args.jobs, "report_to": getattr(args, "report_to", None),
                          "critic_envs": getattr(args, "critic_envs", None)}
    kw["out"] = Path(args.out or ("runs/study-quick" if args.quick else "runs/study"))
    kw = {k: v for k, v in kw.items() if v is not None}
    from turngym.cli_args import parse_kv

    extra = parse_kv(getattr(args, "set", None) or [], flag="--set")
    unknown = sorted(set(extra) - set(StudyConfig.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"unknown StudyConfig field(s) {unknown}; fields: {', '.join(StudyConfig.__dataclass_fields__)}")
    kw |= extra
    model = getattr(args, "model", None)
    if model and model != "tiny":
        return StudyConfig.pretrained_config(model, **kw)
    return StudyConfig.quick_config(**kw) if args.quick else StudyConfig(**kw)


def main(argv: Sequence[str] | None = None) -> int:
    """``turngym study ...`` with ``argv`` the arguments after ``study``."""
    import argparse

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="turngym study")
    setup_parser(parser)
    return run_from_args(parser.parse_args(argv))


def run_from_args(args: Any) -> int:
    """Run what parsed ``turngym study credit`` arguments ask for."""
    if args.report_only:
        print(rewrite_report(Path(args.out or "runs/study")))
        return 0
    run_study(config_from_args(args))
    return 0


def rewrite_report(out: Path) -> Path:
    """Regenerate ``out``'s report from its files, with the command recorded in its config."""
    from turngym.study.report import write_report

    cfg_path = out / "study_config.json"
    if not cfg_path.exists():
        raise ConfigError(f"{out} holds no study (no study_config.json): run `turngym study credit --out {out}` first")
    data = json.loads(cfg_path.read_text())
    cfg = StudyConfig(**{k: v for k, v in data.items() if k in StudyConfig.__dataclass_fields__})
    return write_report(out, command=regenerate_command(cfg))
