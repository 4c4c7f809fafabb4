"""What a credit-assignment study (:mod:`turngym.study.credit`) runs: its configuration, its runs,
and the training configuration of each — shared by the study, its warm starts
(:mod:`turngym.study.warm`) and the scripts that train single runs the study's way."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.study.presets import ENV_PRESETS, EnvPreset, study_model

__all__ = ["CLAIMS", "CRITIC_ARMS", "FARM_CAP", "FARM_WEIGHTS", "RunSpec", "StudyConfig", "outcome_only_weights", "plan_runs", "run_model",
           "steps_for", "train_config"]

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


def train_config(cfg: StudyConfig, spec: RunSpec, steps: int) -> Any:
    """The TrainConfig of run ``spec``: the env preset's fields, then the study's shared ones, then the
    pretrained model's and the run's own overrides (later wins)."""
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


