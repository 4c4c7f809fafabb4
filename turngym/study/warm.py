"""The warm starts of a study: one imitation phase per (env, seed), or one per env shared by the seeds,
saved beside its held-out evaluations so that every arm starting from it is judged against the same
numbers (:mod:`turngym.study.credit`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from turngym.study.plan import RunSpec, StudyConfig, train_config
from turngym.study.presets import ENV_PRESETS
from turngym.trainers.atomic import is_complete_dir, write_text

__all__ = ["episode_stats", "heldout_outcomes", "prepare_warm_start", "same_heldout", "warm_ready", "warm_start", "warm_start_dir", "warm_start_evals", "with_heldout_outcomes"]


def episode_stats(episodes: list[Any], env_id: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
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
    train_cfg = train_config(cfg, RunSpec("warm", env, "grpo", seed), steps=1)
    return Trainer(train_cfg, out, progress=cfg.progress, log=None).warm_start_only(out / "model")


def same_heldout(cfg: StudyConfig, env: str, train_cfg: Any) -> bool:
    """True when the held-out evaluation is the run's own final one: no unseen split, fresh
    training tasks (``task_pool=0``, so the trainer evaluates on held-out seeds) and as many episodes."""
    return ENV_PRESETS[env].heldout_env_id is None and train_cfg.task_pool == 0 and train_cfg.eval_episodes == cfg.heldout_episodes


def heldout_outcomes(episodes: Sequence[Any]) -> dict[str, int]:
    """Success (0/1) per held-out task seed: every run and warm start of a study is evaluated on the
    same held-out tasks (the trainer's evaluation seeds do not depend on the run's seed), so two
    evaluations can be compared task by task — a paired test, blind to how hard the draw was."""
    return {str(ep.seed): int(ep.success) for ep in episodes if not ep.infra_error and ep.seed is not None}


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
    heldout_id, base_cfg = _heldout_id(env), _eval_config(cfg, env, seed)
    res: dict[str, Any] = {}
    if cfg.pretrained and base:
        base_model = Trainer(replace(base_cfg, keep_system_prompt=True), wdir / "base-eval", progress=cfg.jobs == 1, log=None).load()
        res["base_heldout"] = base_model.evaluate(cfg.base_episodes or cfg.heldout_episodes, env_id=heldout_id)
        res["base_heldout_eval"] = episode_stats(base_model.last_eval_episodes, heldout_id, base_cfg.env_kwargs)
        del base_model
    warm = _warm_policy(cfg, env, seed, base_cfg)
    res["warm_eval"] = warm.evaluate()
    res["warm_heldout"] = res["warm_eval"] if same_heldout(cfg, env, base_cfg) else warm.evaluate(cfg.heldout_episodes, env_id=heldout_id)
    res["warm_heldout_eval"] = episode_stats(warm.last_eval_episodes, heldout_id, base_cfg.env_kwargs)
    res["heldout_outcomes"] = heldout_outcomes(warm.last_eval_episodes)
    write_text(path, json.dumps(res, indent=1))
    return res


def with_heldout_outcomes(cfg: StudyConfig, env: str, seed: int, *, base: bool = True) -> dict[str, Any]:
    """:func:`warm_start_evals` with the per-task held-out outcomes (:func:`heldout_outcomes`). A warm
    start evaluated before they were kept is evaluated once more for them while its weights are
    there; that second evaluation's success is kept beside the first (``outcomes_success``): seeded
    sampling replays the first wherever the engine is deterministic, and a reader sees whether it did."""
    res = warm_start_evals(cfg, env, seed, base=base)
    wdir = warm_start_dir(cfg, env, seed)
    if "heldout_outcomes" in res or not is_complete_dir(wdir / "model"):
        return res
    warm = _warm_policy(cfg, env, seed, _eval_config(cfg, env, seed))
    warm.evaluate(cfg.heldout_episodes, env_id=_heldout_id(env))
    res["heldout_outcomes"] = heldout_outcomes(warm.last_eval_episodes)
    res["outcomes_success"] = float(np.mean(list(res["heldout_outcomes"].values()))) if res["heldout_outcomes"] else float("nan")
    write_text(wdir / "evals.json", json.dumps(res, indent=1))
    return res


def _heldout_id(env: str) -> str:
    preset = ENV_PRESETS[env]
    return preset.heldout_env_id or preset.env_id


def _eval_config(cfg: StudyConfig, env: str, seed: int) -> Any:
    """The TrainConfig a warm start (and the base model) is evaluated under: the runs' own, no imitation."""
    return replace(train_config(cfg, RunSpec("warm", env, "grpo", cfg.warm_seed(seed)), steps=1), warmup_steps=0)


def _warm_policy(cfg: StudyConfig, env: str, seed: int, eval_cfg: Any) -> Any:
    from turngym.trainers.loop import Trainer

    model = str(warm_start(cfg, env, seed))
    return Trainer(replace(eval_cfg, model=model), warm_start_dir(cfg, env, seed) / "warm-eval", progress=cfg.jobs == 1, log=None).load()


def prepare_warm_start(cfg: StudyConfig, env: str, seed: int) -> Path:
    """The warm start of ``(env, seed)`` and, for a pretrained model, its evaluations."""
    path = warm_start(cfg, env, seed)
    if cfg.pretrained:
        warm_start_evals(cfg, env, seed)
    return path


def warm_ready(cfg: StudyConfig, env: str, seed: int) -> bool:
    """The warm start of ``(env, seed)`` is saved whole (and, for a pretrained model, evaluated)."""
    wdir = warm_start_dir(cfg, env, seed)
    return is_complete_dir(wdir / "model") and (not cfg.pretrained or (wdir / "evals.json").exists())


