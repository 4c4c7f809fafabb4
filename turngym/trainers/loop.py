"""The training loop: rollout → rewards → advantages (by name) → clipped PG loss → update.

:class:`Trainer` is thin orchestration over the library's parts, readable top to bottom:

1. **Warm start** — behaviour cloning of (noisy) oracle demonstrations
   (:mod:`turngym.trainers.imitation`), then the success rate of that policy is measured.
2. **RL iterations** — for each step: sample ``groups_per_step`` tasks, roll out
   ``group_size`` episodes per task with the current policy (:func:`turngym.rollout.run_episodes`,
   exact token ids and log-probs), shape per-turn rewards from the env's signals
   (:class:`turngym.rewards.RewardShaper`), compute per-turn advantages with the estimator named
   by ``algo`` (:func:`turngym.trainers.advantages.compute_advantages`), put each turn's
   advantage on its action tokens and minimize the clipped policy-gradient loss (+ β·KL to the
   warm-started policy as a separate loss term) with gradient accumulation.
3. **Bookkeeping** — ``OUT/metrics.jsonl`` (one JSON line per warm-up chunk, evaluation and RL
   step), the warm-started model, a checkpoint after every ``save_every`` steps (weights or LoRA
   adapters, optimizer), ``OUT/learning_curve.png`` and ``OUT/summary.json``.

Every phase ends with an atomic commit (:mod:`turngym.trainers.rundir`), so ``resume=True``
continues a run killed at any point *exactly* where an uninterrupted run would be: every random
draw of step ``k`` is seeded by ``(seed, k)``, the warm start is never redone on top of itself, a
finished run is left as it is, and damaged files are named instead of loaded.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.core.extras import require_extra
from turngym.trainers.atomic import ArtifactError, write_json, write_text
from turngym.trainers.config import TrainConfig
from turngym.trainers.rundir import ResumePoint, RunDir
from turngym.trainers.tracking import NullTracker, Tracker, episode_rows, open_tracker, require_backends

__all__ = ["EVAL_SEED", "Trainer", "TrainResult", "train"]

EVAL_SEED = 10_000_000
"""First task seed of the held-out evaluation tasks (``task_pool=0``); studies evaluate on the same ones."""
_DEMO_SEED = 20_000_000
_TRAIN_SEED = 30_000_000


@dataclass
class TrainResult:
    """What a run achieved (also written to ``OUT/summary.json``)."""

    success_before: float
    success_after: float
    steps: int
    seconds: float
    out: Path

    @property
    def improvement(self) -> float:
        return self.success_after - self.success_before


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])


class Trainer:
    """Runs one training job described by a :class:`TrainConfig` into the directory ``out``.

    Args:
        config: the run (ignored on resume: the saved ``OUT/config.json`` is used).
        out: output directory.
        resume: continue the run in ``out`` from its last valid save instead of starting over.
        overwrite: start over even if ``out`` holds a run's results (they are deleted); without
            it, a fresh run refuses such a directory rather than silently replacing its results.
        progress: show progress bars (stderr).
        log: where one-line status messages go (None = silent).
        hook: called with the name of every save and evaluation boundary as the run reaches it
            (``"eval@0"``, ``"checkpoint@3 written"``, ...) — fault-injection tests raise from it
            to stop the run exactly there.
        success_before: the warm start's success rate on this run's evaluation tasks, when the
            caller measured it already (a study whose arms share one warm start evaluates it
            once), so the run skips evaluating it.
    """

    def __init__(self, config: TrainConfig, out: str | Path, *, resume: bool = False, overwrite: bool = False, progress: bool = True,
                 log: Callable[[str], None] | None = print, hook: Callable[[str], None] | None = None,
                 success_before: float | None = None) -> None:
        self.out = Path(out)
        self.known_before = success_before
        self.rundir = RunDir(self.out)
        self.resume = resume
        self.overwrite = overwrite
        self.hook = hook
        self.last_eval_episodes: list[Any] = []
        """Episodes of the latest :meth:`evaluate` (tool calls, hops, … beyond its success rate)."""
        self.tracker: Tracker = NullTracker()
        """Mirrors every ``metrics.jsonl`` row (``config.report_to``); open only while :meth:`run` runs."""
        self._last_rl_batch: tuple[list[Any], list[Any]] = ([], [])
        self.critic: Any = None
        """The learned turn-level critic (:class:`~turngym.trainers.critic.TurnCritic`) when ``config.critic_kind`` is set."""
        self._critic_last: tuple[np.ndarray, np.ndarray] | None = None
        self._infra_seen = 0
        self._episodes_seen = 0
        """Infra-error episodes and all episodes of this process's RL rollouts (``max_infra_error_rate``)."""
        if resume and overwrite:
            raise ConfigError("resume continues the run in out, overwrite discards it: pass one of them")
        if resume:
            config = self._saved_config()
        self.config = config
        self.progress = progress
        self.log = log or (lambda msg: None)

    def _saved_config(self) -> TrainConfig:
        path = self.rundir.config
        if not path.exists():
            if self.rundir.holds_results():
                raise ArtifactError(f"{path} is missing, so the run in {self.out} cannot be continued: start over with "
                                    f"`turngym train --out {self.out} --overwrite` (discards its results), or restore config.json")
            raise ConfigError(f"nothing to resume in {self.out}: no config.json (start without --resume)")
        try:
            return TrainConfig.load(path)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ArtifactError(f"{path} is damaged ({exc}): restore it, or start over with `turngym train --out {self.out} --overwrite`") from exc

    # ---------------------------------------------------------------------- setup
    def _setup(self, source: Path | None = None) -> None:
        """Load the policy from ``source``: the run's saved warm start, or (None) the base model."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from turngym.agents.render import ChatRenderer
        from turngym.rewards import RewardShaper

        cfg = self.config
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.autocast = cfg.bf16 and self.device == "cuda"
        source = source if source is not None else self._model_path()
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        dtype = torch.bfloat16 if self.autocast else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(self.device)
        self.renderer = ChatRenderer(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        if cfg.episodes is not None:
            from turngym.trainers.saved import load_training_episodes, reward_spec_of

            self.saved_episodes = load_training_episodes(cfg.episodes, self.tokenizer, self.model)
            if cfg.minibatches > len(self.saved_episodes):
                raise ConfigError(f"minibatches={cfg.minibatches} but {cfg.episodes} holds {len(self.saved_episodes)} trainable "
                                  "episodes: use fewer minibatches")
            spec = reward_spec_of(self.saved_episodes)
        else:
            probe = self._make_env()
            spec = probe.reward_spec
            probe.close()
        self.shaper = RewardShaper(spec, gamma=1.0, weights=cfg.reward_weights, cap=cfg.shaping_cap)
        # PAPO's process score has weights of its own, so an outcome-only reward can be paired
        # with a dense process signal (the paper's decoupling); by default the env spec's.
        self.process_shaper = RewardShaper(spec, gamma=1.0, weights=cfg.process_weights or {}, cap=cfg.shaping_cap)
        self.success_threshold = spec.success_threshold

    def _model_path(self) -> Path:
        from turngym.agents.hf import resolve_model_path

        if self.config.model == "tiny" and self.config.tiny_model:
            from turngym.agents.tiny import TinyModelConfig, build_tiny_model

            try:
                return build_tiny_model(config=TinyModelConfig(**self.config.tiny_model))
            except TypeError as exc:
                raise ConfigError(f"tiny_model: {exc}; fields are those of turngym.agents.tiny.TinyModelConfig") from exc
        return resolve_model_path(self.config.model)

    def _make_env(self, env_id: str | None = None) -> Any:
        import turngym

        env = turngym.make(env_id or self.config.env_id, **self.config.env_kwargs)
        if not self.config.show_system_prompt:
            env.unwrapped.system_prompt = ""
        return env

    def _policy(self, *, seed: int) -> Any:
        from turngym.agents.hf import HFPolicy

        if self.config.engine == "vllm":
            self._engine_sync()
            return self.engine.policy(temperature=self.config.temperature, max_new_tokens=self.config.max_new_tokens,
                                      seed=seed, name=f"vllm:{self.config.model}")
        return HFPolicy(
            self.model,
            self.tokenizer,
            temperature=self.config.temperature,
            max_new_tokens=self.config.max_new_tokens,
            seed=seed,
            max_batch_size=256,
            constrain_choices=self.config.constrain_choices,
            name=f"hf:{self.config.model}",
        )

    def _rollout(self, seeds: list[int], *, group_size: int, policy_seed: int, desc: str | None = None, env_id: str | None = None) -> list[Any]:
        """Play ``group_size`` episodes per seed (on ``env_id``, default the run's env); ``desc``
        shows a progress bar (episodes, turns), since evaluating a pretrained model on a CPU takes minutes."""
        from turngym.rollout import run_episodes

        self.model.eval()
        env_id = env_id or self.config.env_id
        callbacks: dict[str, Any] = {}
        if desc:
            bar, turns = self._bar(len(seeds) * group_size, desc), [0]

            def on_turn(_ep: Any, _turn: Any) -> None:
                turns[0] += 1
                if turns[0] % 8 == 0:
                    bar.set_postfix(turns=turns[0], refresh=True)

            callbacks = {"on_episode": lambda _ep: bar.update(1), "on_turn": on_turn}
        try:
            return run_episodes(
                lambda: self._make_env(env_id),
                self._policy(seed=policy_seed),
                seeds,
                batch_size=len(seeds) * group_size,
                group_size=group_size,
                history=self.config.history,
                env_id=env_id,
                **callbacks,
            )
        finally:
            if desc:
                bar.close()

    def _engine_sync(self) -> Any:
        """Start the vLLM rollout engine on first use and push the trainer's weights into it if they
        changed since the last push (after an update, the warm start, a resumed checkpoint).
        Returns the push's :class:`~turngym.trainers.engine.SyncStats`, or None when up to date."""
        from turngym.trainers.engine import RolloutEngine, sync_if_stale

        if getattr(self, "engine", None) is None:
            self.engine = RolloutEngine(self._model_path(), seed=self.config.seed, engine_kwargs=self.config.engine_kwargs)
            self.log(f"vLLM engine started in {self.engine.start_seconds:.0f} s")
        return sync_if_stale(self.engine, self.model)

    def evaluate(self, n: int | None = None, *, env_id: str | None = None) -> float:
        """Success rate of the current policy, sampling at ``temperature``: on held-out task seeds,
        or on the task pool (cycled) when ``task_pool`` is set. ``env_id``: on the held-out task
        seeds of another env instead (an unseen split, e.g. ``turngym/Household-Unseen-v0``)."""
        n = n or self.config.eval_episodes
        if n == 0:
            return float("nan")
        pool = self.config.task_pool if env_id is None else 0
        seeds = [i % pool for i in range(n)] if pool else [EVAL_SEED + i for i in range(n)]
        eps = self._rollout(seeds, group_size=1, policy_seed=self.config.seed + EVAL_SEED, desc="evaluate", env_id=env_id)
        self.last_eval_episodes = eps  # for callers that want more than the success rate
        from turngym.rollout import check_infra_error_rate

        check_infra_error_rate(eps, self.config.max_infra_error_rate, what="an evaluation")  # a biased success rate is no result
        eps = [e for e in eps if not e.infra_error]
        return float(np.mean([e.success for e in eps])) if eps else float("nan")

    # ---------------------------------------------------------------------- warm start
    def _warm_start(self) -> None:
        import torch

        from turngym.agents.render import render_episode
        from turngym.rollout import run_episodes
        from turngym.trainers.batch import collate, token_logprobs
        from turngym.trainers.imitation import NoisyOracle, describe, sft_batches
        from turngym.trainers.losses import token_nll

        cfg = self.config
        if cfg.warmup_steps == 0:
            return
        demos = run_episodes(
            self._make_env,
            NoisyOracle(cfg.demo_noise, seed=cfg.seed),
            self._demo_seeds(),
            batch_size=256,
            env_id=cfg.env_id,
        )
        samples = [render_episode(ep, self.renderer, train_text_actions=True) for ep in demos]
        stats = describe(samples)
        self.log(f"warm start: {len(samples)} demonstrations (noise {cfg.demo_noise}, {np.mean([e.success for e in demos]):.0%} solved), "
                 f"{stats['demo_tokens']:.0f} tokens each; {cfg.warmup_steps} imitation steps")
        model = self._trainable_for_warmup()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.warmup_lr, weight_decay=cfg.weight_decay)
        batches = sft_batches(len(samples), cfg.warmup_batch_size, cfg.warmup_steps, lambda s: _rng(cfg.seed, 1, s))
        model.train()
        bar = self._bar(len(batches), "warm start")
        losses: list[float] = []
        for step, idx in enumerate(batches):
            opt.zero_grad(set_to_none=True)
            total_tokens = sum(sum(samples[i].loss_mask) for i in idx)
            for chunk in _by_length(idx, samples, cfg.micro_batch_size):
                batch = collate([samples[i] for i in chunk], None, self.pad_id, self.device)
                with self._autocast():
                    logp = token_logprobs(model, batch)
                loss = token_nll(logp, batch.mask_next) * (batch.n_tokens / max(total_tokens, 1))
                loss.backward()
                losses.append(float(loss.item()) * max(total_tokens, 1) / max(batch.n_tokens, 1))
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            bar.update(1)
            bar.set_postfix(nll=f"{np.mean(losses[-5:]):.3f}")
            if (step + 1) % 25 == 0 or step + 1 == len(batches):
                self._metric({"phase": "warmup", "step": step + 1, "nll": float(np.mean(losses[-25:]))})
        bar.close()
        self.model = self._merge_warmup(model)

    def _demo_seeds(self) -> list[int]:
        cfg = self.config
        if cfg.task_pool:
            return [i % cfg.task_pool for i in range(cfg.demo_episodes)]
        return [_DEMO_SEED + cfg.seed * 100_003 + i for i in range(cfg.demo_episodes)]

    def _trainable_for_warmup(self) -> Any:
        if not self.config.use_lora:
            return self.model
        return self._add_lora(self.model)

    def _merge_warmup(self, model: Any) -> Any:
        return model.merge_and_unload() if self.config.use_lora else model

    def _add_lora(self, model: Any) -> Any:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError("LoRA needs peft: pip install peft (or pass lora=False)") from exc
        import torch

        cfg = self.config
        layers, targets = None, "all-linear"
        if cfg.lora_layers:
            n_layers = int(model.config.num_hidden_layers)
            if cfg.lora_layers > n_layers:
                raise ConfigError(f"lora_layers={cfg.lora_layers} but the model has {n_layers} decoder layers")
            layers = list(range(n_layers - cfg.lora_layers, n_layers))
            head = model.get_output_embeddings()  # peft takes a layer range only with named targets: every linear but the head
            targets = sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear) and mod is not head})
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules=targets, lora_dropout=0.0, task_type="CAUSAL_LM",
                          layers_to_transform=layers)
        with torch.random.fork_rng(devices=[]):  # adapters initialised from the seed alone: a resumed run draws the same ones
            torch.manual_seed(cfg.seed)
            return get_peft_model(model, lora)

    # ---------------------------------------------------------------------- RL step
    def _rl_step(self, step: int, opt: Any) -> dict[str, Any]:
        import torch

        from turngym.agents.render import render_episode
        from turngym.rollout import to_turn_table
        from turngym.trainers.advantages import compute_advantages, estimator_inputs
        from turngym.trainers.batch import collate, table_token_advantages, token_logprobs
        from turngym.trainers.critic import whiten
        from turngym.trainers.engine import recompute_logprobs, sample_mismatch, tis_pg_loss, use_trainer_old
        from turngym.trainers.losses import clipped_pg_loss, kl_penalty
        from turngym.trainers.providers import fill_inputs

        cfg = self.config
        t0 = time.perf_counter()
        rng = _rng(cfg.seed, 2, step)
        if cfg.episodes is not None:  # saved episodes (e.g. captured by turngym proxy): the same batch every step
            episodes = list(self.saved_episodes)
        else:
            if cfg.task_pool:
                seeds = [int(s) for s in rng.choice(cfg.task_pool, size=cfg.groups_per_step, replace=cfg.groups_per_step > cfg.task_pool)]
            else:
                seeds = [int(s) for s in rng.integers(_TRAIN_SEED, 2**31 - 1, size=cfg.groups_per_step)]
            episodes = self._rollout(seeds, group_size=cfg.group_size, policy_seed=int(rng.integers(2**31)))
        infra_errors, infra_rate = self._count_infra_errors(episodes)
        episodes = [ep for ep in episodes if not ep.infra_error and ep.turns]  # never score infra failures
        t_rollout = time.perf_counter() - t0

        shaped = [self.shaper.shape_episode(ep).total for ep in episodes]
        samples = [render_episode(ep, self.renderer) for ep in episodes]
        table = to_turn_table(episodes, rewards=shaped, samples=samples)
        critic_targets: list[Any] | None = None
        critic_stats: dict[str, float] = {}
        if self.critic is not None:  # the critic's values of every turn's state, before this step's update
            table["value"] = np.concatenate(self._critic_values(samples))
        fill_inputs(cfg.algo, episodes, table, self)  # the estimator's declared inputs the rollout lacks
        adv = compute_advantages(cfg.algo, table, **cfg.algo_params)
        if self.critic is not None:
            critic_targets, critic_stats = self._critic_targets(table, samples)
        if "value" in estimator_inputs(cfg.algo):  # PPO whitens a critic's advantages over the batch (their scale is the reward's)
            adv = whiten(adv)
        self._last_rl_batch = (episodes, np.split(adv, np.flatnonzero(table["last"])[:-1] + 1))
        tok_adv = table_token_advantages(samples, table, adv)
        engine_stats: dict[str, float] = {}
        if cfg.engine == "vllm":  # π_old is the trainer's; the engine's log-probs only weight the tokens (TIS)
            trainer_old = recompute_logprobs(self.model, samples, self.pad_id, self.device, micro_batch_size=cfg.micro_batch_size,
                                             autocast=self._autocast)
            engine_stats = sample_mismatch(samples, trainer_old, cap=cfg.tis_cap)
        self.model.train()
        if self.critic is not None:
            self.critic.train()
        stats: dict[str, list[float]] = {"loss": [], "pg_loss": [], "kl": [], "clip_frac": [], "ratio": [], "grad_norm": [], "tis_weight": []}
        order = np.arange(len(samples))
        for epoch in range(cfg.ppo_epochs):
            _rng(cfg.seed, 3, step, epoch).shuffle(order)
            for mb in np.array_split(order, cfg.minibatches):
                opt.zero_grad(set_to_none=True)
                if self.critic is not None:
                    self.critic.zero_grad()
                total_tokens = sum(sum(samples[i].loss_mask) for i in mb)
                for chunk in _by_length(mb, samples, cfg.micro_batch_size):
                    batch = collate([samples[i] for i in chunk], [tok_adv[i] for i in chunk], self.pad_id, self.device)
                    weight = batch.n_tokens / max(total_tokens, 1)
                    value_loss = None
                    with self._autocast(), self._critic_reading():
                        logp = token_logprobs(self.model, batch)
                        if self.critic is not None and critic_targets is not None:  # the shared head reads this very pass
                            value_loss, vdiag = self.critic.loss(self.model, batch, [critic_targets[i] for i in chunk])
                            stats.setdefault("value_loss", []).append(float(value_loss.item()))
                            stats.setdefault("value_clip_frac", []).append(vdiag["value_clip_frac"])
                    if cfg.engine == "vllm":
                        engine_logp = use_trainer_old(batch, [trainer_old[i] for i in chunk])
                        pg, diag = tis_pg_loss(logp, batch.old_logp_next, engine_logp, batch.adv_next, batch.mask_next,
                                               clip_low=cfg.clip_low, clip_high=cfg.clip_high, cap=cfg.tis_cap)
                        stats["tis_weight"].append(diag["tis_weight"])
                    else:
                        pg, diag = clipped_pg_loss(logp, batch.old_logp_next, batch.adv_next, batch.mask_next, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
                    loss = pg
                    if value_loss is not None:
                        loss = loss + cfg.value_coef * value_loss
                    if cfg.kl_coef > 0:
                        with torch.no_grad(), self._reference(), self._autocast():
                            ref_logp = token_logprobs(self.model, batch)
                        kl = kl_penalty(logp, ref_logp, batch.mask_next)
                        loss = loss + cfg.kl_coef * kl
                        stats["kl"].append(float(kl.item()))
                    (loss * weight).backward()
                    stats["loss"].append(float(loss.item()))
                    stats["pg_loss"].append(float(pg.item()))
                    stats["clip_frac"].append(diag["clip_frac"])
                    stats["ratio"].append(diag["ratio"])
                norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], cfg.max_grad_norm)
                stats["grad_norm"].append(float(norm))
                opt.step()
                if self.critic is not None:
                    stats.setdefault("critic_grad_norm", []).append(self.critic.step())
        sync = self._engine_sync() if cfg.engine == "vllm" else None  # the next rollout samples the updated weights
        if sync is not None:
            engine_stats |= {"sync_s": round(sync.seconds, 3), "sync_mb": round(sync.bytes / 2**20, 1)}

        returns = np.array([ep.total_reward for ep in episodes])
        return {
            "phase": "rl",
            "step": step + 1,
            "success": float(np.mean([ep.success for ep in episodes])),
            "mean_return": float(returns.mean()),
            "mean_shaped_return": float(np.mean([s.sum() for s in shaped])),
            "mean_turns": float(np.mean([len(ep.turns) for ep in episodes])),
            "invalid_rate": float(np.mean([not t.action_valid for ep in episodes for t in ep.turns])),
            "zero_adv_frac": float(np.mean(adv == 0.0)),
            "adv_abs_mean": float(np.abs(adv).mean()),
            **{k: float(np.mean(v)) for k, v in stats.items() if v},
            **critic_stats,
            "episodes": len(episodes),
            "infra_errors": infra_errors,
            "infra_error_rate": round(infra_rate, 4),
            "tokens": int(sum(sum(s.loss_mask) for s in samples)),
            **engine_stats,
            "rollout_s": round(t_rollout, 2),
            "step_s": round(time.perf_counter() - t0, 2),
        }

    def _count_infra_errors(self, episodes: list[Any]) -> tuple[int, float]:
        """This batch's infra-error episodes and the run's share so far (RL rollouts of this
        process); raises :class:`~turngym.core.errors.TooManyInfraErrors` past
        ``max_infra_error_rate``, or when no episode of the batch is left to train on."""
        from turngym.core.errors import TooManyInfraErrors
        from turngym.rollout import check_infra_error_rate

        bad = sum(ep.infra_error is not None for ep in episodes)
        self._infra_seen += bad
        self._episodes_seen += len(episodes)
        rate = check_infra_error_rate(episodes, self.config.max_infra_error_rate, what="this run's RL rollouts",
                                      infra=self._infra_seen, total=self._episodes_seen)
        if bad and bad == len(episodes):
            raise TooManyInfraErrors(f"every one of the {bad} episodes of this RL step ended in an infrastructure error "
                                     f"(the first: {episodes[0].infra_error}): nothing is left to train on; fix the env or its infrastructure")
        return bad, rate

    # ---------------------------------------------------------------------- critic
    def _make_critic(self) -> Any:
        """The learned critic of this run (None without one), built on the RL policy."""
        cfg = self.config
        if cfg.critic_kind is None:
            return None
        from turngym.trainers.critic import TurnCritic

        return TurnCritic(self.model, kind=cfg.critic_kind, lr=cfg.critic_lr, clip=cfg.value_clip, max_grad_norm=cfg.max_grad_norm,
                          weight_decay=cfg.weight_decay, seed=cfg.seed)

    def _critic_values(self, samples: list[Any]) -> list[np.ndarray]:
        assert self.critic is not None
        with self._autocast():
            return self.critic.values(self.model, samples, pad_id=self.pad_id, device=self.device, micro_batch_size=self.config.micro_batch_size)

    def _critic_reading(self) -> Any:
        import contextlib

        return self.critic.reading(self.model) if self.critic is not None else contextlib.nullcontext()

    def _critic_targets(self, table: dict[str, Any], samples: list[Any]) -> tuple[list[Any], dict[str, float]]:
        """Per-episode regression targets (λ-returns with the estimator's γ, λ) and the diagnostics:
        explained variance of the old values against those targets and against the Monte-Carlo returns."""
        from turngym.trainers.critic import (
            TurnTargets,
            critic_discount,
            explained_variance,
            lambda_returns,
            turn_positions,
        )

        cfg = self.config
        gamma, lam = critic_discount(cfg.algo, cfg.algo_params)
        values = np.asarray(table["value"], np.float64)
        _, ret = lambda_returns(table, values, gamma=gamma, lam=lam)
        _, mc = lambda_returns(table, np.zeros_like(values), gamma=gamma, lam=1.0)
        cuts = np.flatnonzero(table["last"])[:-1] + 1  # rows are episode by episode, in the order of samples
        targets = [TurnTargets(turn_positions(s), v, r) for s, v, r in zip(samples, np.split(values, cuts), np.split(ret, cuts))]
        self._critic_last = (values, ret)
        return targets, {"critic_ev": explained_variance(values, ret), "critic_ev_mc": explained_variance(values, mc),
                         "value_mean": float(values.mean()), "value_target_mean": float(ret.mean())}

    # ---------------------------------------------------------------------- helpers
    def _autocast(self) -> Any:
        import contextlib

        import torch

        return torch.autocast("cuda", dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()

    def _reference(self) -> Any:
        """Context in which ``self.model`` computes the reference (warm-started) policy."""
        import contextlib

        if self.config.use_lora:
            return self.model.disable_adapter()
        ref = self._ref_model

        @contextlib.contextmanager
        def swap() -> Any:
            live = self.model
            self.model = ref
            try:
                yield
            finally:
                self.model = live

        return swap()

    def _bar(self, total: int, desc: str, initial: int = 0) -> Any:
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, disable=not self.progress, file=sys.stderr, dynamic_ncols=True)

    def _event(self, name: str) -> None:
        if self.hook is not None:
            self.hook(name)

    def _sub_hook(self, label: str) -> Callable[[str], None]:
        return lambda what: self._event(f"{label} {what}")

    # ---------------------------------------------------------------------- checkpoints
    def _trainable_state(self) -> dict[str, Any]:
        if self.config.use_lora:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.model)
        return self.model.state_dict()

    def _save_checkpoint(self, step: int, opt: Any, before: float) -> None:
        import torch

        rd = self.rundir
        path = rd.checkpoint_dir(step)
        commit, metrics = rd.commit("rl", step, success_before=before, checkpoint=path.relative_to(self.out).as_posix())

        def write(tmp: Path) -> None:
            torch.save(self._trainable_state(), tmp / "trainable.pt")
            torch.save(opt.state_dict(), tmp / "optimizer.pt")
            if self.critic is not None:  # head, separate trunk and the critic's optimizer: resume continues it exactly
                torch.save(self.critic.state_dict(), tmp / "critic.pt")

        rd.save_artifact(path, write, commit, metrics, hook=self._sub_hook(f"checkpoint@{step}"))
        self._event(f"checkpoint saved@{step}")
        rd.write_state(commit)
        self._event(f"checkpoint committed@{step}")
        rd.prune(self.config.keep_checkpoints)
        self._checkpoint = commit.checkpoint

    def _load_checkpoint(self, point: ResumePoint, opt: Any) -> None:
        """Weights (or adapters) and optimizer state of a verified checkpoint into the live objects."""
        import torch

        assert point.source is not None
        fix = f"delete {point.source} to resume from the checkpoint before it, or start over with `turngym train --out {self.out} --overwrite`"
        for name, target in (("trainable.pt", self.model), ("optimizer.pt", opt)):
            file = point.source / name
            try:
                state = torch.load(file, map_location=self.device)
                if name == "optimizer.pt":
                    opt.load_state_dict(state)
                elif self.config.use_lora:
                    from peft import set_peft_model_state_dict

                    set_peft_model_state_dict(target, state)
                else:
                    target.load_state_dict(state)
            except Exception as exc:  # a file that verifies but does not fit this run's model
                raise ArtifactError(f"{file} cannot be loaded into this run ({type(exc).__name__}: {exc}); {fix}") from exc
        if self.critic is not None:
            file = point.source / "critic.pt"
            try:
                self.critic.load_state_dict(torch.load(file, map_location=self.device))
            except Exception as exc:  # missing (a checkpoint of a run without a critic) or damaged
                raise ArtifactError(f"{file} cannot be loaded into this run's critic ({type(exc).__name__}: {exc}); {fix}") from exc
        self._checkpoint = point.commit.checkpoint

    # ---------------------------------------------------------------------- run
    def _begin(self) -> ResumePoint | None:
        """Prepare ``out`` and return where the run continues (None: from the beginning)."""
        rd = self.rundir
        self.out.mkdir(parents=True, exist_ok=True)
        if self.resume:
            point, notes = rd.resume_point(self.config.steps)
            for note in notes:
                self.log(f"warning: {note}")
            if point is None:
                self.log(f"nothing of the run in {self.out} was saved yet: starting it from the beginning")
                rd.restore_metrics("", "the start")
                rd.write_state(rd.commit("started")[0])
                return None
            note = rd.restore_metrics(point.metrics, str(point.source or rd.state))
            if note:
                self.log(f"warning: {note}")
            return point
        if rd.holds_results() and not self.overwrite:
            raise ConfigError(f"{self.out} already holds a training run ({rd.describe(self.config.steps)}): pass --resume to continue it, "
                              "--overwrite to discard it and start over, or choose another --out")
        rd.clear()
        self.config.save(rd.config)
        rd.write_state(rd.commit("started")[0])
        return None

    def _rl_setup(self) -> Any:
        """From the warm-started policy to the RL one: adapters, the KL reference, the optimizer."""
        import copy

        cfg = self.config
        if cfg.use_lora:
            self.model = self._add_lora(self.model)
        self._ref_model = copy.deepcopy(self.model).eval() if cfg.kl_coef > 0 and not cfg.use_lora else None
        opt = self._optimizer()
        self.critic = self._make_critic()
        return opt

    def _metric(self, record: dict[str, Any]) -> None:
        """Append a row to ``metrics.jsonl`` (the record), then mirror it to the trackers."""
        self.rundir.append_metric(record)
        self.tracker.log_metrics(record)

    def run(self) -> TrainResult:
        require_backends(self.config.report_to)  # a missing tracker package fails before anything is written
        with require_extra("training", "train"):  # and so does a missing torch: no half-started run dir
            import torch  # noqa: F401
            import transformers  # noqa: F401
        try:
            return self._run()
        finally:
            self.tracker.close()
            self.tracker = NullTracker()

    def _run(self) -> TrainResult:
        cfg = self.config
        rd = self.rundir
        start_time = time.perf_counter()
        point = self._begin()
        self._prepare()
        phase = point.commit.phase if point else "started"
        if point is not None and phase == "finished":
            return self._already_finished(point, start_time)
        self.tracker = open_tracker(cfg.report_to, self.out, fresh=point is None, config=cfg.to_dict())

        if phase == "started":
            self._setup()
            self._event("warm_start@0")
            self._warm_start()
            commit, metrics = rd.commit("warm_started")
            rd.save_artifact(rd.warm_start, self._save_model, commit, metrics, hook=self._sub_hook("warm_start@0"))
            self._event("warm_start saved@0")
            rd.write_state(commit)
        else:
            self._setup(rd.warm_start)  # verified by resume_point

        if phase in ("started", "warm_started"):
            if phase == "warm_started":
                self.log(f"resuming {self.out}: the warm start is saved; evaluating it")
            self._event("eval@0")
            before = self.evaluate() if self.known_before is None else self.known_before
            self._metric({"phase": "eval", "step": 0, "success": before, "label": "warm start"})
            self._event("eval logged@0")
            self.log(f"success rate of the warm-started policy: {before:.1%} ({cfg.eval_episodes} episodes)")
            opt = self._rl_setup()
            first = 0
            self._save_checkpoint(0, opt, before)
        else:
            assert point is not None and point.commit.success_before is not None
            opt = self._rl_setup()
            self._load_checkpoint(point, opt)
            first, before = point.commit.step, point.commit.success_before
            self.log(f"resuming {self.out} at step {first}/{cfg.steps}")

        bar = self._bar(cfg.steps, f"{cfg.algo} on {cfg.env_id}", initial=first)
        for step in range(first, cfg.steps):
            self._event(f"rl@{step + 1}")
            record = self._rl_step(step, opt)
            self._metric(record)
            if step == first or (step + 1) % max(1, cfg.steps // 8) == 0 or step + 1 == cfg.steps:
                self.tracker.log_episodes(step + 1, episode_rows(*self._last_rl_batch))
            self._event(f"rl logged@{step + 1}")
            bar.update(1)
            bar.set_postfix(success=f"{record['success']:.2f}", loss=f"{record['loss']:+.3f}")
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
                self._event(f"eval@{step + 1}")
                self._metric({"phase": "eval", "step": step + 1, "success": self.evaluate()})
                self._event(f"eval logged@{step + 1}")
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                self._save_checkpoint(step + 1, opt, before)
        bar.close()

        self._event(f"eval@{cfg.steps}")
        after = self.evaluate()
        # the final evaluation's episodes, for `turngym view OUT` (the file is written whole or not at all)
        write_text(self.out / "episodes.jsonl", "".join(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n" for ep in self.last_eval_episodes))
        self._metric({"phase": "eval", "step": cfg.steps, "success": after, "label": "after RL"})
        self._event(f"eval logged@{cfg.steps}")
        rd.write_state(rd.commit("finished", cfg.steps, success_before=before, success_after=after, checkpoint=self._checkpoint)[0])
        self._event(f"finished@{cfg.steps}")
        seconds = time.perf_counter() - start_time
        self._write_summary(before, after, seconds)
        self._event(f"summary@{cfg.steps}")
        self._plot()
        self.log(f"success rate: {before:.1%} (warm start) -> {after:.1%} (after {cfg.steps} RL steps, {cfg.algo}); "
                 f"{seconds:.0f} s; see {self.out}/metrics.jsonl and learning_curve.png")
        return TrainResult(success_before=before, success_after=after, steps=cfg.steps, seconds=seconds, out=self.out)

    def _already_finished(self, point: ResumePoint, start_time: float) -> TrainResult:
        """Resuming a finished run changes nothing (it only restores a lost summary or plot)."""
        cfg, commit = self.config, point.commit
        before = commit.success_before if commit.success_before is not None else float("nan")
        after = commit.success_after if commit.success_after is not None else float("nan")
        self.log(f"{self.out} is already finished ({commit.step}/{cfg.steps} RL steps, success {before:.1%} -> {after:.1%}): "
                 "nothing to do (pass --overwrite to train it again)")
        seconds = time.perf_counter() - start_time
        try:
            json.loads((self.out / "summary.json").read_text())
        except (OSError, ValueError):
            self._write_summary(before, after, 0.0)
        if not (self.out / "learning_curve.png").exists():
            self._plot()
        return TrainResult(success_before=before, success_after=after, steps=commit.step, seconds=seconds, out=self.out)

    def _write_summary(self, before: float, after: float, seconds: float) -> None:
        cfg = self.config
        summary = {"env_id": cfg.env_id, "algo": cfg.algo, "model": cfg.model, "success_before": before, "success_after": after,
                   "improvement": after - before, "steps": cfg.steps, "seconds_this_session": round(seconds, 1)}
        write_json(self.out / "summary.json", summary)

    def _plot(self) -> None:
        cfg = self.config
        try:
            from turngym.trainers.plot import plot_learning_curve

            plot_learning_curve(self.rundir.metrics, self.out / "learning_curve.png", title=f"{cfg.algo} on {cfg.env_id}")
            if self._critic_last is not None:  # the last RL step's values against their targets, and EV per step
                from turngym.trainers.atomic import complete_lines
                from turngym.trainers.critic import plot_value_vs_return

                rows = [json.loads(x) for x in complete_lines(self.rundir.metrics) if x.strip()]
                ev = [(r["step"], r["critic_ev"]) for r in rows if r.get("phase") == "rl" and "critic_ev" in r]
                plot_value_vs_return(*self._critic_last, self.out / "value_vs_return.png", ev_by_step=ev, title=f"{cfg.critic_kind} critic")
        except ImportError:
            self.log("matplotlib is not installed: skipped learning_curve.png (pip install matplotlib)")

    def load(self) -> Trainer:
        """Load ``config.model`` as it is (no warm start, no RL, nothing written), for callers
        that only :meth:`evaluate` a model."""
        self._prepare()
        self._setup()
        return self

    def warm_start_only(self, save_to: str | Path) -> Path:
        """Run only the imitation phase and save the warm-started model (a normal HF model
        directory, written atomically with a manifest) to ``save_to``; its NLL curve goes to
        ``OUT/metrics.jsonl`` (``out``'s earlier files are replaced: this is a building block
        whose callers decide whether to rebuild, with :func:`turngym.trainers.atomic.is_complete_dir`).

        A later run with ``model=save_to, warmup_steps=0`` starts RL from exactly these
        weights — how several estimators share one warm start.
        """
        save_to = Path(save_to)
        self.out.mkdir(parents=True, exist_ok=True)
        self.rundir.clear()
        self.config.save(self.rundir.config)
        self._prepare()
        self._setup()
        self._warm_start()
        commit, metrics = self.rundir.commit("warm_started")
        self.rundir.save_artifact(save_to, self._save_model, commit, metrics, hook=self._sub_hook("warm_start@0"))
        return save_to

    def _prepare(self) -> None:
        import torch

        torch.manual_seed(self.config.seed)
        self._checkpoint: str | None = None

    def _save_model(self, path: Path) -> None:
        """The current weights and tokenizer as a normal HF model directory."""
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    def _optimizer(self) -> Any:
        import torch

        params = [p for p in self.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.config.lr, weight_decay=self.config.weight_decay)

def train(config: TrainConfig | None = None, out: str | Path = "runs/default", **options: Any) -> TrainResult:
    """Run :class:`Trainer` (``options``: ``resume``, ``progress``, ``log``)."""
    return Trainer(config or TrainConfig(), out, **options).run()


def _by_length(indices: Any, samples: Sequence[Any], size: int) -> list[np.ndarray]:
    """Split a minibatch into micro-batches of similar sequence length (fewer padded tokens).

    The loss of each micro-batch is weighted by its share of the minibatch's tokens, so the
    accumulated gradient does not depend on how the minibatch is split — only the padding does.
    """
    idx = np.asarray(indices)
    idx = idx[np.argsort([len(samples[i].input_ids) for i in idx], kind="stable")]
    return np.array_split(idx, math.ceil(len(idx) / size))
