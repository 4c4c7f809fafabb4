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
import math
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.study.presets import ENV_PRESETS, EnvPreset, study_model  # noqa: F401  (re-exported)
from turngym.trainers.atomic import is_complete_dir, write_text

__all__ = ["CLAIMS", "ENV_PRESETS", "RunSpec", "StudyConfig", "plan_runs", "run_one", "run_study"]

CLAIMS = ("gigpo_vs_grpo", "variance", "papo", "farming", "info_gain", "critic")
#: Claim 6's arms: (algo, variant label, TrainConfig overrides). The plain ``gae`` run uses the
#: default critic (no overrides, so it is named like claim 1's runs); the separate critic is a variant.
CRITIC_ARMS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("gae", "", {}), ("gae", "gae_separate", {"critic": "separate"}), ("grpo", "", {}), ("gigpo", "", {}),
)


# Claim 4: the calculator's ``tool_ok`` signal pays every successful call (repeats included);
# the other shaping terms are switched off so the only thing to farm is that one signal.
FARM_WEIGHTS = {"tool_ok": 0.25, "new_intermediate": 0.0, "repeat_call": 0.0, "progress": 0.0}
FARM_CAP = 0.25


def outcome_only_weights(env: str) -> dict[str, float]:
    """Shaping weights that switch every shaped signal of ``env`` off (reward = the outcome)."""
    import turngym

    probe = turngym.make(ENV_PRESETS[env].env_id)
    names = probe.reward_spec.names
    probe.close()
    return {name: 0.0 for name in names}


@dataclass(frozen=True)
class RunSpec:
    """One training run of the study."""

    claim: str
    env: str
    algo: str
    seed: int
    variant: str = ""
    """A label for runs of one algo that differ otherwise (claim 4: ``naive`` / ``bounded``)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """TrainConfig fields beyond the shared ones (reward weights, shaping cap)."""

    @property
    def arm(self) -> str:
        return self.variant or self.algo

    @property
    def name(self) -> str:
        """``<group>/<env>-<arm>-s<seed>``: plain runs (no overrides) live under ``train/`` and
        are shared by the claims that need them (GRPO on Math is claim 1's and claim 3's)."""
        group = "train" if not self.overrides else self.claim
        return f"{group}/{self.env}-{self.arm}-s{self.seed}"


@dataclass
class StudyConfig:
    """The whole study; shared hyper-parameters apply to every run alike."""

    envs: Sequence[str] = ("household", "shop")
    """Envs of claim 1's grid. At this CPU scale ``math`` is the feasible one (see the report)."""
    algos: Sequence[str] = ("gigpo", "grpo")
    claims: Sequence[str] = CLAIMS
    seeds: int = 3
    budget: int = 6000
    """RL env steps per run (turns taken in training rollouts); converted to RL iterations from
    the mean episode length of the warm-start demonstrations' env (measured, see ``steps_for``)."""
    out: Path = Path("runs/study")
    quick: bool = False
    jobs: int = 1
    groups_per_step: int = 8
    group_size: int = 8
    warmup_steps: int = 150
    demo_episodes: int = 600
    task_pool: int = 16
    eval_episodes: int = 96
    heldout_episodes: int = 96
    lr: float = 2e-4
    max_turns: int | None = None
    """Override every env's turn limit (quick mode: an untrained policy plays to the limit)."""
    max_new_tokens: int | None = None
    """Override the action token budget (quick mode)."""
    report_to: tuple[str, ...] = ()
    """Experiment trackers of every training run (``TrainConfig.report_to``); each run's under its own directory."""
    critic_envs: Sequence[str] = ("household",)
    """Envs of claim 6 (PPO with a learned critic vs GRPO vs GiGPO)."""
    model: str = "tiny"
    """``"tiny"`` (the study's 0.5M-parameter model, trained in full) or a pretrained model
    (``"smollm2"``, a model directory), trained with LoRA (``lora_layers``) — see
    :meth:`pretrained_config` for the defaults that fit a pretrained model on a CPU."""
    lora_layers: int = 0
    """Pretrained models: adapters on the last this-many decoder layers (0 = all)."""
    threads: int = 1
    """torch threads per training run (1 suits the tiny model and ``--jobs``; a 135M model wants the cores)."""
    train_overrides: dict[str, Any] = field(default_factory=dict)
    """TrainConfig fields set for every run after the env presets (e.g. a pretrained model's ``warmup_lr``)."""
    base_episodes: int | None = None
    """Held-out episodes of the pretrained base model's zero-shot evaluation (None = ``heldout_episodes``):
    with the system prompt and an untrained model running to the turn limit, the costliest evaluation."""
    shared_warm_start: bool = False
    """One warm start per env shared by every seed (seeds then vary only the RL phase), instead of
    one per (env, seed): a pretrained model's warm start costs as much as an RL run."""

    def __post_init__(self) -> None:
        from turngym.trainers.tracking import parse_backends

        self.out = Path(self.out)
        self.report_to = parse_backends(self.report_to)  # the CLI's comma string, or a saved list
        bad = [e for e in (*self.envs, *self.critic_envs) if e not in ENV_PRESETS]
        if bad:
            raise ConfigError(f"unknown env(s) {bad}; choose from {sorted(ENV_PRESETS)}")
        bad = [c for c in self.claims if c not in CLAIMS]
        if bad:
            raise ConfigError(f"unknown claim(s) {bad}; choose from {list(CLAIMS)}")
        from turngym.trainers.advantages import ESTIMATORS

        bad = [a for a in self.algos if a not in ESTIMATORS]
        if bad:
            raise ConfigError(f"unknown algo(s) {bad}; choose from {sorted(ESTIMATORS)}")
        if self.seeds < 1 or self.budget < 1 or self.jobs < 1:
            raise ConfigError("seeds, budget and jobs must be >= 1")

    @classmethod
    def quick_config(cls, **kw: Any) -> StudyConfig:
        """The CI smoke test: every claim, one seed, a few RL steps, small models and pools."""
        base = dict(seeds=1, budget=8, quick=True, groups_per_step=2, group_size=4, warmup_steps=4, demo_episodes=16,
                    task_pool=4, eval_episodes=4, heldout_episodes=4, envs=("math",), critic_envs=("math",), max_turns=3, max_new_tokens=12)
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)

    @property
    def pretrained(self) -> bool:
        """A pretrained model (LoRA, shared evaluated warm starts) rather than the tiny one."""
        return self.model != "tiny"

    @property
    def progress(self) -> bool:
        """Progress bars for the training runs: a pretrained model's take minutes, and only one runs at a time."""
        return self.pretrained and self.jobs == 1

    def warm_seed(self, seed: int) -> int:
        """The seed of the warm start a run of ``seed`` starts from."""
        return 0 if self.shared_warm_start else seed

    @classmethod
    def pretrained_config(cls, model: str, **kw: Any) -> StudyConfig:
        """A pretrained model (LoRA) at a budget a 2-core CPU runs in one to two hours: fresh
        training tasks every episode (``task_pool=0``), so every evaluation is on tasks never
        trained on; small groups; a short warm start shared by the seeds; adapters on the top
        quarter of the layers (backward stops there); the cores for one run at a time; clean
        demonstrations (``demo_noise=0``): the noisy oracle's random turns teach the tiny model to
        recover, but a pretrained model imitates them as habits (spurious calculator calls after the
        answer is known), which costs most of the warm start's held-out success."""
        base = dict(model=model, task_pool=0, groups_per_step=4, group_size=4, warmup_steps=16, demo_episodes=256,
                    eval_episodes=64, heldout_episodes=64, base_episodes=32, lr=2e-4, lora_layers=8, threads=2, shared_warm_start=True,
                    seeds=1, budget=560, claims=("gigpo_vs_grpo",), envs=("math", "search"),
                    train_overrides={"warmup_lr": 2e-3, "warmup_batch_size": 16, "micro_batch_size": 8, "demo_noise": 0.0})
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["envs"], d["algos"], d["claims"] = list(self.envs), list(self.algos), list(self.claims)
        d["critic_envs"] = list(self.critic_envs)
        d["report_to"] = list(self.report_to)
        return d


def plan_runs(cfg: StudyConfig) -> list[RunSpec]:
    """Every training run of the study, claim by claim (claim 2 needs none)."""
    runs: list[RunSpec] = []
    seeds = range(cfg.seeds)
    if "gigpo_vs_grpo" in cfg.claims:
        # seed-major: the arms of a seed finish together, so a study stopped early still holds paired comparisons
        runs += [RunSpec("gigpo_vs_grpo", env, algo, s) for env in cfg.envs for s in seeds for algo in cfg.algos]
    if "papo" in cfg.claims:  # PAPO's setting: an outcome-only reward, where GRPO goes silent on all-correct groups
        zero = {"reward_weights": outcome_only_weights("math")}
        runs += [RunSpec("papo", "math", algo, s, f"{algo}_outcome", zero) for algo in ("papo", "grpo") for s in seeds]
    if "farming" in cfg.claims:
        for variant, cap in (("naive", math.inf), ("bounded", FARM_CAP)):
            runs += [RunSpec("farming", "math", "grpo", s, variant, {"reward_weights": FARM_WEIGHTS, "shaping_cap": cap}) for s in seeds]
    if "info_gain" in cfg.claims:
        runs += [RunSpec("info_gain", "search", algo, s) for algo in ("igpo", "grpo") for s in seeds]
    if "critic" in cfg.claims:
        runs += [RunSpec("critic", env, algo, s, variant, over) for env in cfg.critic_envs for algo, variant, over in CRITIC_ARMS for s in seeds]
    unique: dict[str, RunSpec] = {}
    for r in runs:
        unique.setdefault(r.name, r)
    return list(unique.values())


def steps_for(cfg: StudyConfig, preset: EnvPreset) -> tuple[int, float]:
    """RL iterations that spend about ``cfg.budget`` env steps, from the mean length of episodes
    of the warm-start demonstrator (a noisy oracle) on this env; and that mean length."""
    import turngym
    from turngym.rollout import run_episodes
    from turngym.trainers.imitation import NoisyOracle

    kwargs = preset.env_kwargs | (preset.pretrained_env_kwargs if cfg.pretrained else {})  # the env the runs play
    eps = run_episodes(lambda: turngym.make(preset.env_id, **kwargs), NoisyOracle(0.3, seed=0), list(range(16)), batch_size=16)
    mean_len = float(np.mean([len(e.turns) for e in eps]))
    per_step = cfg.groups_per_step * cfg.group_size * mean_len
    return max(1, round(cfg.budget / per_step)), mean_len


def run_model(cfg: StudyConfig) -> Path:
    """The model every run of ``cfg`` starts from: :func:`study_model` or the pretrained one."""
    if not cfg.pretrained:
        return study_model()
    from turngym.agents.hf_models import resolve_model_path

    return Path(resolve_model_path(cfg.model))


def _train_config(cfg: StudyConfig, spec: RunSpec, steps: int) -> Any:
    from turngym.trainers.config import TrainConfig

    preset = ENV_PRESETS[spec.env]
    pretrained = cfg.pretrained
    env_kwargs = dict(preset.env_kwargs) | (preset.pretrained_env_kwargs if pretrained else {})
    env_kwargs |= {"max_turns": cfg.max_turns} if getattr(cfg, "max_turns", None) else {}
    params: dict[str, Any] = dict(  # the tiny model is trained in full, as model="tiny"; a pretrained one with LoRA
        model=str(run_model(cfg)), lora=pretrained, lora_layers=cfg.lora_layers if pretrained else 0, keep_system_prompt=False,
        threads=cfg.threads, env_id=preset.env_id, env_kwargs=env_kwargs, algo=spec.algo, seed=spec.seed, steps=steps,
        groups_per_step=cfg.groups_per_step, group_size=cfg.group_size, warmup_steps=cfg.warmup_steps,
        demo_episodes=cfg.demo_episodes, task_pool=cfg.task_pool, eval_episodes=cfg.eval_episodes,
        max_new_tokens=getattr(cfg, "max_new_tokens", None) or preset.max_new_tokens, lr=cfg.lr, save_every=10**6,
        report_to=cfg.report_to,
    )
    if spec.algo in ("gigpo",):
        params["algo_params"] = {"gamma": 0.95}
    if spec.algo == "gae":  # GiGPO's discount, GAE's usual λ
        params["algo_params"] = {"gamma": 0.95, "lam": 0.95}
    if not cfg.quick:
        params.update(preset.train)
    params.update(cfg.train_overrides)
    if pretrained:
        params.update(preset.pretrained_train)
    params.update(spec.overrides)
    return TrainConfig(**params)


def _episode_stats(episodes: list[Any], env_id: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Success, length, calculator calls and success by hop count of evaluation episodes."""
    eps = [e for e in episodes if not e.infra_error]
    out: dict[str, Any] = {
        "episodes": len(eps),
        "success": float(np.mean([e.success for e in eps])) if eps else float("nan"),
        "mean_turns": float(np.mean([len(e.turns) for e in eps])) if eps else float("nan"),
        "tool_calls": float(np.mean([sum(t.signals.get("tool_ok", 0.0) for t in e.turns) for e in eps])) if eps else float("nan"),
        "answered": float(np.mean([bool(e.outcome.get("terminated", e.turns and e.turns[-1].terminated)) for e in eps])) if eps else float("nan"),
    }
    if "SearchQA" in env_id:
        import turngym

        env = turngym.make(env_id, **env_kwargs)
        by_hop: dict[int, list[bool]] = {}
        for e in eps:
            env.reset(options={"task": e.task_id})
            by_hop.setdefault(int(env.unwrapped.task.hops), []).append(e.success)
        env.close()
        out["success_by_hops"] = {str(h): float(np.mean(v)) for h, v in sorted(by_hop.items())}
        out["episodes_by_hops"] = {str(h): len(v) for h, v in sorted(by_hop.items())}
    return out


def warm_start_dir(cfg: StudyConfig, env: str, seed: int) -> Path:
    """Where the warm start of ``(env, seed)`` lives: one per env and seed, shared by every
    arm (the imitation phase does not depend on the estimator or the reward weights)."""
    return cfg.out / "warm" / f"{env}-s{cfg.warm_seed(seed)}"


def warm_start(cfg: StudyConfig, env: str, seed: int) -> Path:
    """Imitation of noisy oracle demonstrations for ``(env, seed)``, saved as a model directory
    (its NLL curve in ``metrics.jsonl`` beside it); an existing one is reused."""
    from turngym.trainers.loop import Trainer

    out = warm_start_dir(cfg, env, seed)
    if is_complete_dir(out / "model"):  # a model directory is reused only if it was saved whole
        return out / "model"
    train_cfg = _train_config(cfg, RunSpec("warm", env, "grpo", seed), steps=1)
    return Trainer(train_cfg, out, progress=cfg.progress, log=None).warm_start_only(out / "model")


def _same_heldout(cfg: StudyConfig, env: str, train_cfg: Any) -> bool:
    """True when the held-out evaluation is the run's own final one: no unseen split, fresh
    training tasks (``task_pool=0``, so the trainer evaluates on held-out seeds) and as many episodes."""
    return ENV_PRESETS[env].heldout_env_id is None and train_cfg.task_pool == 0 and train_cfg.eval_episodes == cfg.heldout_episodes


def warm_start_evals(cfg: StudyConfig, env: str, seed: int, *, base: bool = True) -> dict[str, Any]:
    """Success of the warm start on the runs' evaluation tasks and on the held-out split, and of
    the pretrained base model zero-shot on the held-out split (with the env's system prompt, the
    format it is given at inference; the trained runs see none); measured once per warm start
    and kept beside it (``evals.json``), since every arm and seed sharing it would measure the same.
    ``base=False``: not the base model (a second warm start of the same model, e.g. an imitation
    control, would measure it again)."""
    from turngym.trainers.loop import Trainer

    wdir = warm_start_dir(cfg, env, seed)
    path = wdir / "evals.json"
    if path.exists():
        return json.loads(path.read_text())
    preset = ENV_PRESETS[env]
    heldout_id = preset.heldout_env_id or preset.env_id
    base_cfg = replace(_train_config(cfg, RunSpec("warm", env, "grpo", cfg.warm_seed(seed)), steps=1), warmup_steps=0)
    res: dict[str, Any] = {}
    if cfg.pretrained and base:
        base_model = Trainer(replace(base_cfg, keep_system_prompt=True), wdir / "base-eval", progress=cfg.jobs == 1, log=None).load()
        res["base_heldout"] = base_model.evaluate(cfg.base_episodes or cfg.heldout_episodes, env_id=heldout_id)
        res["base_heldout_eval"] = _episode_stats(base_model.last_eval_episodes, heldout_id, base_cfg.env_kwargs)
        del base_model
    warm = Trainer(replace(base_cfg, model=str(warm_start(cfg, env, seed))), wdir / "warm-eval", progress=cfg.jobs == 1, log=None).load()
    res["warm_eval"] = warm.evaluate()
    res["warm_heldout"] = res["warm_eval"] if _same_heldout(cfg, env, base_cfg) else warm.evaluate(cfg.heldout_episodes, env_id=heldout_id)
    res["warm_heldout_eval"] = _episode_stats(warm.last_eval_episodes, heldout_id, base_cfg.env_kwargs)
    write_text(path, json.dumps(res, indent=1))
    return res


def prepare_warm_start(cfg: StudyConfig, env: str, seed: int) -> Path:
    """The warm start of ``(env, seed)`` and, for a pretrained model, its evaluations."""
    path = warm_start(cfg, env, seed)
    if cfg.pretrained:
        warm_start_evals(cfg, env, seed)
    return path


def _warm_ready(cfg: StudyConfig, env: str, seed: int) -> bool:
    """The warm start of ``(env, seed)`` is saved whole (and, for a pretrained model, evaluated)."""
    wdir = warm_start_dir(cfg, env, seed)
    return is_complete_dir(wdir / "model") and (not cfg.pretrained or (wdir / "evals.json").exists())


def run_one(cfg: StudyConfig, spec: RunSpec, steps: int) -> dict[str, Any]:
    """Train one run from its (env, seed)'s shared warm start, evaluate it on the pool and on
    held-out tasks; write ``study.json``."""
    from turngym.trainers.loop import Trainer

    out = cfg.out / "runs" / spec.name
    preset = ENV_PRESETS[spec.env]
    train_cfg = replace(_train_config(cfg, spec, steps), model=str(warm_start(cfg, spec.env, spec.seed)), warmup_steps=0)
    known = warm_start_evals(cfg, spec.env, spec.seed) if cfg.pretrained else {}
    t0 = time.perf_counter()
    resume = _unfinished(out, train_cfg)  # exactly from its newest checkpoint; any other run without study.json is redone
    trainer = Trainer(train_cfg, out, resume=resume, overwrite=not resume, progress=cfg.progress, log=None,
                      success_before=known.get("warm_eval"))
    result = trainer.run()
    # the pool evaluation of the trained policy (the trainer's final one), with its episodes
    pool = _episode_stats(trainer.last_eval_episodes, preset.env_id, train_cfg.env_kwargs)
    # held out: the unseen split, or fresh task seeds of the same env
    heldout_id = preset.heldout_env_id or preset.env_id
    if _same_heldout(cfg, spec.env, train_cfg):
        held = pool
    else:
        trainer.evaluate(cfg.heldout_episodes, env_id=heldout_id)
        held = _episode_stats(trainer.last_eval_episodes, heldout_id, train_cfg.env_kwargs)
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
    warm = sorted({(r.env, cfg.warm_seed(r.seed)) for r in todo if not _warm_ready(cfg, r.env, r.seed)})
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
