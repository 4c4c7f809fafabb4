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
   step), a checkpoint after every ``save_every`` steps (weights or LoRA adapters, optimizer,
   step) from which ``resume=True`` continues *exactly* (every random draw of step ``k`` is
   seeded by ``(seed, k)``), ``OUT/learning_curve.png`` and ``OUT/summary.json``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.trainers.config import TrainConfig

__all__ = ["Trainer", "TrainResult", "train"]

_EVAL_SEED = 10_000_000
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
        resume: continue from ``OUT/checkpoint`` instead of starting over.
        progress: show progress bars (stderr).
        log: where one-line status messages go (None = silent).
    """

    def __init__(self, config: TrainConfig, out: str | Path, *, resume: bool = False, progress: bool = True, log: Callable[[str], None] | None = print) -> None:
        self.out = Path(out)
        self.resume = resume
        self.last_eval_episodes: list[Any] = []
        """Episodes of the latest :meth:`evaluate` (tool calls, hops, … beyond its success rate)."""
        if resume:
            if not (self.out / "config.json").exists():
                raise ConfigError(f"nothing to resume in {self.out}: no config.json (start without --resume)")
            config = TrainConfig.load(self.out / "config.json")
        self.config = config
        self.progress = progress
        self.log = log or (lambda msg: None)

    # ---------------------------------------------------------------------- setup
    def _setup(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from turngym.agents.render import ChatRenderer
        from turngym.rewards import RewardShaper

        cfg = self.config
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.autocast = cfg.bf16 and self.device == "cuda"
        warm_dir = self.out / "warm_start"
        source = warm_dir if self.resume and (warm_dir / "config.json").exists() else self._model_path()
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        dtype = torch.bfloat16 if self.autocast else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(self.device)
        self.renderer = ChatRenderer(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        probe = self._make_env()
        self.shaper = RewardShaper(probe.reward_spec, gamma=1.0, weights=cfg.reward_weights, cap=cfg.shaping_cap)
        # PAPO's process score has weights of its own, so an outcome-only reward can be paired
        # with a dense process signal (the paper's decoupling); by default the env spec's.
        self.process_shaper = RewardShaper(probe.reward_spec, gamma=1.0, weights=cfg.process_weights or {}, cap=cfg.shaping_cap)
        self.success_threshold = probe.reward_spec.success_threshold
        probe.close()

    def _model_path(self) -> Path:
        from turngym.agents.hf import resolve_model_path

        if self.config.model == "tiny" and self.config.tiny_model:
            from turngym.agents.tiny import TinyModelConfig, build_tiny_model

            try:
                return build_tiny_model(config=TinyModelConfig(**self.config.tiny_model))
            except TypeError as exc:
                raise ConfigError(f"tiny_model: {exc}; fields are those of turngym.agents.tiny.TinyModelConfig") from exc
        return resolve_model_path(self.config.model)

    def _make_env(self) -> Any:
        import turngym

        env = turngym.make(self.config.env_id, **self.config.env_kwargs)
        if not self.config.show_system_prompt:
            env.unwrapped.system_prompt = ""
        return env

    def _policy(self, *, seed: int) -> Any:
        from turngym.agents.hf import HFPolicy

        return HFPolicy(
            self.model,
            self.tokenizer,
            temperature=self.config.temperature,
            max_new_tokens=self.config.max_new_tokens,
            seed=seed,
            max_batch_size=256,
            name=f"hf:{self.config.model}",
        )

    def _rollout(self, seeds: list[int], *, group_size: int, policy_seed: int) -> list[Any]:
        from turngym.rollout import run_episodes

        self.model.eval()
        return run_episodes(
            self._make_env,
            self._policy(seed=policy_seed),
            seeds,
            batch_size=len(seeds) * group_size,
            group_size=group_size,
            history=self.config.history,
            env_id=self.config.env_id,
        )

    def evaluate(self, n: int | None = None) -> float:
        """Success rate of the current policy, sampling at ``temperature``: on held-out task seeds,
        or on the task pool (cycled) when ``task_pool`` is set."""
        n = n or self.config.eval_episodes
        if n == 0:
            return float("nan")
        pool = self.config.task_pool
        seeds = [i % pool for i in range(n)] if pool else [_EVAL_SEED + i for i in range(n)]
        eps = self._rollout(seeds, group_size=1, policy_seed=self.config.seed + _EVAL_SEED)
        self.last_eval_episodes = eps  # for callers that want more than the success rate
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
        cfg = self.config
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
        return get_peft_model(model, lora)

    # ---------------------------------------------------------------------- RL step
    def _rl_step(self, step: int, opt: Any) -> dict[str, Any]:
        import torch

        from turngym.agents.render import render_episode
        from turngym.trainers.advantages import TurnTable, compute_advantages
        from turngym.trainers.batch import collate, token_advantages, token_logprobs
        from turngym.trainers.losses import clipped_pg_loss, kl_penalty

        cfg = self.config
        t0 = time.perf_counter()
        rng = _rng(cfg.seed, 2, step)
        if cfg.task_pool:
            seeds = [int(s) for s in rng.choice(cfg.task_pool, size=cfg.groups_per_step, replace=cfg.groups_per_step > cfg.task_pool)]
        else:
            seeds = [int(s) for s in rng.integers(_TRAIN_SEED, 2**31 - 1, size=cfg.groups_per_step)]
        episodes = self._rollout(seeds, group_size=cfg.group_size, policy_seed=int(rng.integers(2**31)))
        episodes = [ep for ep in episodes if not ep.infra_error and ep.turns]  # never score infra failures
        t_rollout = time.perf_counter() - t0

        parts = [self.shaper.shape_episode(ep) for ep in episodes]
        shaped = [p.total for p in parts]
        columns = self._turn_columns(episodes, shaped)
        if cfg.algo == "papo":  # the process score of a turn: its (bounded) shaping under the process weights
            columns["process"] = [float(x) for ep in episodes for x in self.process_shaper.shape_episode(ep).shaping]
        adv = compute_advantages(cfg.algo, TurnTable(columns), **cfg.algo_params)
        per_episode, row = [], 0
        for ep in episodes:
            per_episode.append(adv[row : row + len(ep.turns)])
            row += len(ep.turns)

        samples = [render_episode(ep, self.renderer) for ep in episodes]
        tok_adv = [token_advantages(s, a) for s, a in zip(samples, per_episode)]
        self.model.train()
        stats: dict[str, list[float]] = {"loss": [], "pg_loss": [], "kl": [], "clip_frac": [], "ratio": [], "grad_norm": []}
        order = np.arange(len(samples))
        for epoch in range(cfg.ppo_epochs):
            _rng(cfg.seed, 3, step, epoch).shuffle(order)
            for mb in np.array_split(order, cfg.minibatches):
                opt.zero_grad(set_to_none=True)
                total_tokens = sum(sum(samples[i].loss_mask) for i in mb)
                for chunk in _by_length(mb, samples, cfg.micro_batch_size):
                    batch = collate([samples[i] for i in chunk], [tok_adv[i] for i in chunk], self.pad_id, self.device)
                    weight = batch.n_tokens / max(total_tokens, 1)
                    with self._autocast():
                        logp = token_logprobs(self.model, batch)
                    pg, diag = clipped_pg_loss(logp, batch.old_logp_next, batch.adv_next, batch.mask_next, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
                    loss = pg
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
            "episodes": len(episodes),
            "tokens": int(sum(sum(s.loss_mask) for s in samples)),
            "rollout_s": round(t_rollout, 2),
            "step_s": round(time.perf_counter() - t0, 2),
        }

    def _turn_columns(self, episodes: list[Any], shaped: list[np.ndarray]) -> dict[str, list[Any]]:
        cols: dict[str, list[Any]] = {k: [] for k in ("episode", "group", "turn", "reward", "state_key", "correct", "node", "parent")}
        for i, (ep, rewards) in enumerate(zip(episodes, shaped)):
            for t, r in zip(ep.turns, rewards):
                cols["episode"].append(i)
                cols["group"].append(ep.group)
                cols["turn"].append(t.index)
                cols["reward"].append(float(r))
                cols["state_key"].append(t.prev_state_key)
                cols["correct"].append(ep.success)
                cols["node"].append(f"{ep.group}/{t.node}")
                cols["parent"].append(f"{ep.group}/{t.parent}" if t.parent >= 0 else None)
        if self.config.algo in ("igpo", "igpo_turn_group"):
            cols["info_gain"] = self._info_gain(episodes)
        return cols

    def _info_gain(self, episodes: list[Any]) -> list[float]:
        from turngym.rewards import InfoGainScorer

        env = self._make_env()
        golds = []
        for ep in episodes:
            env.reset(options={"task": ep.task_id})
            golds.append(str(env.unwrapped.task.gold))
        env.close()
        self.model.eval()
        gains = InfoGainScorer(self.model, self.tokenizer, batch_size=64).episode_gains(episodes, golds)
        return [float(g) for gs in gains for g in gs]

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

    def _metric(self, record: dict[str, Any]) -> None:
        with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        self._metrics_lines += 1

    # ---------------------------------------------------------------------- checkpoints
    def _trainable_state(self) -> dict[str, Any]:
        if self.config.use_lora:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.model)
        return self.model.state_dict()

    def _save_checkpoint(self, step: int, opt: Any, before: float) -> None:
        import torch

        tmp = self.out / "checkpoint.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        torch.save(self._trainable_state(), tmp / "trainable.pt")
        torch.save(opt.state_dict(), tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, "success_before": before, "metrics_lines": self._metrics_lines}))
        final = self.out / "checkpoint"
        old = self.out / "checkpoint.old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)  # a kill at any point leaves checkpoint or checkpoint.old intact
        shutil.rmtree(old, ignore_errors=True)

    def _load_checkpoint(self, opt: Any) -> dict[str, Any]:
        import torch

        final = self.out / "checkpoint"
        if not (final / "state.json").exists() and (self.out / "checkpoint.old" / "state.json").exists():
            final = self.out / "checkpoint.old"
        state = json.loads((final / "state.json").read_text())
        weights = torch.load(final / "trainable.pt", map_location=self.device)
        if self.config.use_lora:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, weights)
        else:
            self.model.load_state_dict(weights)
        opt.load_state_dict(torch.load(final / "optimizer.pt", map_location=self.device))
        lines = (self.out / "metrics.jsonl").read_text().splitlines()[: state["metrics_lines"]]
        (self.out / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))  # drop lines after the checkpoint
        self._metrics_lines = len(lines)
        return state

    # ---------------------------------------------------------------------- run
    def run(self) -> TrainResult:
        import copy

        cfg = self.config
        start_time = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        can_resume = self.resume and any((self.out / d / "state.json").exists() for d in ("checkpoint", "checkpoint.old"))
        if not self.resume:
            self._clear_outputs()
        self._prepare()

        if self.resume and can_resume:
            if cfg.use_lora:
                self.model = self._add_lora(self.model)
            self._ref_model = copy.deepcopy(self.model).eval() if cfg.kl_coef > 0 and not cfg.use_lora else None
            opt = self._optimizer()
            state = self._load_checkpoint(opt)
            first, before = state["step"], state["success_before"]
            self.log(f"resuming {self.out} at step {first}/{cfg.steps}")
        else:
            if self.resume:
                self.log(f"no checkpoint in {self.out} yet: starting from the beginning")
                (self.out / "metrics.jsonl").unlink(missing_ok=True)
            self._warm_start()
            self._save_model(self.out / "warm_start")
            before = self.evaluate()
            self._metric({"phase": "eval", "step": 0, "success": before, "label": "warm start"})
            self.log(f"success rate of the warm-started policy: {before:.1%} ({cfg.eval_episodes} episodes)")
            if cfg.use_lora:
                self.model = self._add_lora(self.model)
            self._ref_model = copy.deepcopy(self.model).eval() if cfg.kl_coef > 0 and not cfg.use_lora else None
            opt = self._optimizer()
            first = 0
            self._save_checkpoint(0, opt, before)

        bar = self._bar(cfg.steps, f"{cfg.algo} on {cfg.env_id}", initial=first)
        for step in range(first, cfg.steps):
            record = self._rl_step(step, opt)
            self._metric(record)
            bar.update(1)
            bar.set_postfix(success=f"{record['success']:.2f}", loss=f"{record['loss']:+.3f}")
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
                self._metric({"phase": "eval", "step": step + 1, "success": self.evaluate()})
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                self._save_checkpoint(step + 1, opt, before)
        bar.close()

        after = self.evaluate()
        self._metric({"phase": "eval", "step": cfg.steps, "success": after, "label": "after RL"})
        self._save_checkpoint(cfg.steps, opt, before)
        seconds = time.perf_counter() - start_time
        result = TrainResult(success_before=before, success_after=after, steps=cfg.steps, seconds=seconds, out=self.out)
        summary = {"env_id": cfg.env_id, "algo": cfg.algo, "model": cfg.model, "success_before": before, "success_after": after,
                   "improvement": after - before, "steps": cfg.steps, "seconds_this_session": round(seconds, 1)}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2))
        try:
            from turngym.trainers.plot import plot_learning_curve

            plot_learning_curve(self.out / "metrics.jsonl", self.out / "learning_curve.png", title=f"{cfg.algo} on {cfg.env_id}")
        except ImportError:
            self.log("matplotlib is not installed: skipped learning_curve.png (pip install matplotlib)")
        self.log(f"success rate: {before:.1%} (warm start) -> {after:.1%} (after {cfg.steps} RL steps, {cfg.algo}); "
                 f"{seconds:.0f} s; see {self.out}/metrics.jsonl and learning_curve.png")
        return result

    def warm_start_only(self, save_to: str | Path) -> Path:
        """Run only the imitation phase and save the warm-started model (a normal HF model
        directory, written atomically) to ``save_to``; its NLL curve goes to ``OUT/metrics.jsonl``.

        A later run with ``model=save_to, warmup_steps=0`` starts RL from exactly these
        weights — how several estimators share one warm start.
        """
        save_to = Path(save_to)
        self.out.mkdir(parents=True, exist_ok=True)
        self._clear_outputs()
        self._prepare()
        self._warm_start()
        tmp = save_to.with_name(save_to.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self._save_model(tmp)
        tmp.rename(save_to)
        return save_to

    def _clear_outputs(self) -> None:
        """A fresh (not resumed) run: drop an earlier run's files from ``out``, save the config."""
        for name in ("metrics.jsonl", "summary.json", "learning_curve.png"):
            (self.out / name).unlink(missing_ok=True)
        for name in ("checkpoint", "checkpoint.old", "warm_start"):
            shutil.rmtree(self.out / name, ignore_errors=True)
        self.config.save(self.out / "config.json")

    def _prepare(self) -> None:
        import torch

        self._metrics_lines = 0
        torch.manual_seed(self.config.seed)
        self._setup()

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
