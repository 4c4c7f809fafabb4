"""The learner: the trained weights and everything that changes them.

:class:`Learner` owns the policy being trained (loaded from a model directory, warm-started by
imitation, wrapped in LoRA adapters for RL), its optimizer, the KL reference, the learned critic
and the update itself: episodes in → shaped rewards → turn table → advantages by name → clipped
policy-gradient loss (+ β·KL, + the critic's value loss) → optimizer step. It never plays an
episode: where episodes come from (this process's model, a vLLM engine, an asynchronous rollout
worker running an older copy of the weights) is :mod:`turngym.trainers.producer`'s business.

The update is the same for every source; only how far the rollout's log-probs are from the
learner's differs. When they may differ (vLLM samples with its own kernels, an asynchronous
worker with older weights), ``off_policy=True`` recomputes ``π_old`` with the learner's weights
before the update and weights every token by the truncated importance ratio ``min(π_old /
π_behaviour, C)`` (:func:`turngym.trainers.engine.tis_pg_loss`); otherwise the rollout's own
log-probs are ``π_old``.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError, TurngymError
from turngym.trainers.atomic import ArtifactError
from turngym.trainers.config import TrainConfig
from turngym.trainers.rng import seeded_rng

__all__ = ["Learner", "NonFiniteWeights", "by_length", "check_finite", "has_dropout", "native_bf16_cpu", "update_in_bf16"]


class NonFiniteWeights(TurngymError):
    """Weights about to be saved hold NaN or infinity (the update guard missed a divergence)."""


def has_dropout(model: Any) -> bool:
    """Whether ``model``'s training-mode forward is random (a dropout module or a config rate > 0)."""
    import torch

    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        return True
    config = getattr(model, "config", None)
    rates = vars(config).items() if config is not None and hasattr(config, "__dict__") else ()
    return any(("dropout" in name or name.endswith("pdrop")) and isinstance(v, float) and v > 0 for name, v in rates)


def by_length(indices: Any, samples: Sequence[Any], size: int, max_tokens: int = 0) -> list[np.ndarray]:
    """Split a minibatch into micro-batches of similar sequence length (fewer padded tokens).

    At most ``size`` rows each and, with ``max_tokens``, at most that many padded tokens (rows ×
    the longest row; a row longer than that goes alone): activation memory follows tokens, so
    sixteen 2.6k-token episodes are not one micro-batch because sixteen short ones would be.
    A split by rows that fits the token bound is kept as it is.

    The loss of each micro-batch is weighted by its share of the minibatch's tokens, so the
    accumulated gradient does not depend on how the minibatch is split — only the padding does.
    """
    idx = np.asarray(indices)
    idx = idx[np.argsort([len(samples[i].input_ids) for i in idx], kind="stable")]
    by_rows = np.array_split(idx, math.ceil(len(idx) / size))
    if max_tokens <= 0:
        return by_rows
    out: list[np.ndarray] = []
    for part in by_rows:
        if len(part) * len(samples[part[-1]].input_ids) <= max_tokens:  # sorted: the last row is the longest
            out.append(part)
            continue
        start = 0
        for k in range(1, len(part)):  # close a micro-batch before the row that would overflow it
            if (k + 1 - start) * len(samples[part[k]].input_ids) > max_tokens:
                out.append(part[start:k])
                start = k
        out.append(part[start:])
    return out


#: glibc's ``M_MMAP_THRESHOLD`` (mallopt parameter -3) the learner sets on a CPU: 1 MiB.
_MMAP_THRESHOLD = 1 << 20


def return_freed_activations() -> bool:
    """Have glibc give every allocation of 1 MiB or more its own mapping, returned to the OS when freed.

    By default glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so
    after the first backward every activation buffer of a layer (a few MB each) comes from the
    heap, where freed blocks stay resident and fragment: measured on one 2.6k-token SmolLM2 episode
    with checkpointed layers, the peak resident set is 4.07 GB with the default and 1.95 GB with a
    fixed 1 MiB threshold (``benchmarks/bench_train_memory.py``). A fixed threshold also stops the
    adjustment. No-op (False) where the C library is not glibc.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None or platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(name).mallopt(-3, _MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


#: The CPU flags of a native bf16 matrix product (oneDNN uses them; without, bf16 is emulated).
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def native_bf16_cpu(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bf16 matrices natively (its ``flags`` name ``avx512_bf16`` or ``amx_bf16``)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return not _BF16_FLAGS.isdisjoint(line.split(":", 1)[-1].split())
    except OSError:
        pass
    return False


def update_in_bf16(cfg: Any, device: str) -> bool:
    """Whether the update runs in bfloat16 on ``device`` under ``cfg``: ``bf16`` on CUDA, ``cpu_bf16`` on a
    CPU that multiplies bf16 natively (emulated bf16 is slower than float32, so it is not taken there).
    One config thus trains in different arithmetic on different machines; a study that resumes on
    another machine asks this before it mixes the two (``scripts/gpu_study.py``)."""
    if device == "cuda":
        return bool(cfg.bf16)
    return device == "cpu" and bool(cfg.cpu_bf16) and native_bf16_cpu()


def check_finite(state: Mapping[str, Any], what: str) -> None:
    """Raise :class:`NonFiniteWeights` naming the first tensor of ``state`` (nested: an optimizer's or
    a critic's state) that holds a NaN or an infinity: a file of such weights is never written."""
    import torch

    def walk(value: Any, name: str) -> None:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise NonFiniteWeights(f"{what}: {name} holds NaN or infinite values; nothing was saved (an update "
                                       "diverged: lower lr, or check the training data)")
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f"{name}.{k}" if name else str(k))

    walk(state, "")


class Learner:
    """The trained policy and its update (see the module docstring).

    Args:
        config: the run.
        metric: appends a row to the run's metrics (the warm start's NLL curve).
        log: one-line status messages.
        bar: a progress bar factory ``bar(total, desc)``.

    Attributes the estimators' providers read (:class:`~turngym.trainers.providers.ProviderContext`):
    ``model``, ``tokenizer``, ``renderer``, ``pad_id``, ``device``, ``shaper``,
    ``process_shaper``, ``critic`` and ``config``.
    """

    def __init__(self, config: TrainConfig, *, metric: Callable[[dict[str, Any]], None], log: Callable[[str], None],
                 bar: Callable[..., Any]) -> None:
        self.config = config
        self._metric = metric
        self.log = log
        self._bar = bar
        self.model: Any = None
        self.device = "cpu"
        self.autocast_on = False
        self.critic: Any = None
        self.optimizer: Any = None
        """The RL optimizer (AdamW over the trainable weights), built by :meth:`rl_setup`."""
        """The learned turn-level critic (:class:`~turngym.trainers.critic.TurnCritic`) when ``config.critic_kind`` is set."""
        self.critic_last: tuple[np.ndarray, np.ndarray] | None = None
        """The last update's critic values and their targets (for ``value_vs_return.png``)."""
        self.last_batch: tuple[list[Any], list[Any]] = ([], [])
        """The last update's episodes and their per-turn advantages (sampled to the trackers)."""
        self._ref_model: Any = None
        self.saved_episodes: list[Any] | None = None
        """The run's saved training episodes (``config.episodes``), checked against this model."""
        self.skipped_episodes: list[Any] = []
        """Saved records left out by ``config.skip_bad_episodes`` (:class:`~turngym.trainers.saved.BadRecord`)."""

    # ---------------------------------------------------------------------- setup
    def setup(self, source: Path, make_env: Callable[[], Any]) -> None:
        """Load the policy from the model directory ``source``; ``make_env`` builds a probe env for
        the reward spec (the shapers and the success threshold). With ``config.episodes`` the
        saved episodes are loaded instead (refused if another tokenizer or architecture sampled
        them) and the spec is their env's."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from turngym.agents.render import ChatRenderer
        from turngym.rewards import RewardShaper

        cfg = self.config
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.autocast_on = update_in_bf16(cfg, self.device)
        if cfg.cpu_bf16 and self.device == "cpu" and not self.autocast_on:
            self.log("cpu_bf16: this CPU has no native bf16 (avx512_bf16 or AMX); the update stays float32")
        if self.device == "cpu" and cfg.model != "tiny":  # the tiny model's buffers are small: its timings stay as measured
            return_freed_activations()
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        dtype = torch.bfloat16 if self.autocast_on and self.device == "cuda" else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(self.device)
        if cfg.use_gradient_checkpointing:  # layer activations recomputed in backward (train mode only; LoRA keeps it)
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.renderer = ChatRenderer(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        if cfg.episodes is not None:
            from turngym.trainers.saved import load_training_data, reward_spec_of

            data = load_training_data(cfg.episodes, self.tokenizer, self.model, reward_range=cfg.reward_range,
                                      skip_bad=cfg.skip_bad_episodes, renderer=self.renderer)
            for bad in data.skipped:
                self.log(f"skipped saved episode {bad.episode_id!r}: {bad.reason}")
            if data.skipped:
                self.log(f"skipped {len(data.skipped)} of {len(data.skipped) + len(data.episodes)} saved episodes that failed "
                         "their checks (skip_bad_episodes); training on the rest")
            self.saved_episodes, self.skipped_episodes = data.episodes, data.skipped
            if cfg.minibatches > len(self.saved_episodes):
                raise ConfigError(f"minibatches={cfg.minibatches} but {cfg.episodes} holds {len(self.saved_episodes)} trainable "
                                  "episodes: use fewer minibatches")
            spec = reward_spec_of(self.saved_episodes)
        else:
            probe = make_env()
            spec = probe.reward_spec
            probe.close()
        self.shaper = RewardShaper(spec, gamma=1.0, weights=cfg.reward_weights, cap=cfg.shaping_cap)
        # PAPO's process score has weights of its own, so an outcome-only reward can be paired
        # with a dense process signal (the paper's decoupling); by default the env spec's.
        self.process_shaper = RewardShaper(spec, gamma=1.0, weights=cfg.process_weights or {}, cap=cfg.shaping_cap)
        self.success_threshold = spec.success_threshold

    # ---------------------------------------------------------------------- warm start
    def imitate(self, demos: Sequence[Any]) -> None:
        """Behaviour-clone the demonstration episodes for ``warmup_steps`` steps (LoRA adapters are
        merged back, so the warm-started model is a plain one)."""
        import torch

        from turngym.agents.render import render_episode
        from turngym.trainers.batch import collate, token_logprobs
        from turngym.trainers.imitation import describe, sft_batches
        from turngym.trainers.losses import token_nll

        cfg = self.config
        samples = [render_episode(ep, self.renderer, train_text_actions=True) for ep in demos]
        watch = self._warm_stop(samples[len(samples) - cfg.warmup_holdout:]) if cfg.warmup_holdout else None
        samples = samples[: len(samples) - cfg.warmup_holdout]
        stats = describe(samples)
        self.log(f"warm start: {len(samples)} demonstrations (noise {cfg.demo_noise}, {np.mean([e.success for e in demos]):.0%} solved), "
                 f"{stats['demo_tokens']:.0f} tokens each; {cfg.warmup_steps} imitation steps")
        model = self.model if not cfg.use_lora else self.add_lora(self.model)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.warmup_lr, weight_decay=cfg.weight_decay)
        batches = sft_batches(len(samples), cfg.warmup_batch_size, cfg.warmup_steps, lambda s: seeded_rng(cfg.seed, 1, s))
        model.train()
        bar = self._bar(len(batches), "warm start")
        losses: list[float] = []
        for step, idx in enumerate(batches):
            opt.zero_grad(set_to_none=True)
            total_tokens = sum(sum(samples[i].loss_mask) for i in idx)
            for chunk in by_length(idx, samples, cfg.micro_batch_size, cfg.micro_batch_tokens):
                batch = collate([samples[i] for i in chunk], None, self.pad_id, self.device)
                with self.autocast():
                    logp = token_logprobs(model, batch, chunk_tokens=cfg.logit_chunk_tokens)
                loss = token_nll(logp, batch.mask_next) * (batch.n_tokens / max(total_tokens, 1))
                loss.backward()
                losses.append(float(loss.item()) * max(total_tokens, 1) / max(batch.n_tokens, 1))
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            bar.update(1)
            bar.set_postfix(nll=f"{np.mean(losses[-5:]):.3f}")
            if (step + 1) % 25 == 0 or step + 1 == len(batches):
                self._metric({"phase": "warmup", "step": step + 1, "nll": float(np.mean(losses[-25:]))})
            if watch is not None and ((step + 1) % cfg.warmup_check_every == 0 or step + 1 == len(batches)):
                stop, row = watch.check(step + 1, model)
                self._metric(row)
                if stop:
                    self.log(f"warm start stopped after {step + 1} of {cfg.warmup_steps} imitation steps: {watch.reason}")
                    break
        bar.close()
        self.model = model.merge_and_unload() if cfg.use_lora else model

    def _warm_stop(self, heldout: list[Any]) -> Any:
        """The :class:`~turngym.trainers.warmstop.WarmStop` watching imitation on ``heldout``."""
        from turngym.trainers.warmstop import WarmStop, heldout_stats

        cfg = self.config
        return WarmStop(heldout, patience=cfg.warmup_patience, entropy_floor=cfg.warmup_entropy_floor,
                        measure=lambda model, s: heldout_stats(model, s, self.pad_id, self.device, micro_batch_size=cfg.micro_batch_size,
                                                               autocast=self.autocast))

    def add_lora(self, model: Any) -> Any:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError("LoRA needs peft: pip install peft (or pass lora=False)") from exc
        import torch

        cfg = self.config
        layers = None
        targets: str | list[str] = "all-linear" if cfg.lora_targets.strip() == "all-linear" else [t.strip() for t in cfg.lora_targets.split(",") if t.strip()]
        if cfg.lora_layers:
            n_layers = int(model.config.num_hidden_layers)
            if cfg.lora_layers > n_layers:
                raise ConfigError(f"lora_layers={cfg.lora_layers} but the model has {n_layers} decoder layers")
            layers = list(range(n_layers - cfg.lora_layers, n_layers))
            if targets == "all-linear":  # peft takes a layer range only with named targets: every linear but the head
                head = model.get_output_embeddings()
                targets = sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear) and mod is not head})
        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules=targets, lora_dropout=0.0, task_type="CAUSAL_LM",
                          layers_to_transform=layers)
        with torch.random.fork_rng(devices=[]):  # adapters initialised from the seed alone: a resumed run draws the same ones
            torch.manual_seed(cfg.seed)
            return get_peft_model(model, lora)

    def rl_setup(self) -> None:
        """From the warm-started policy to the RL one: adapters, the KL reference, the critic and
        the optimizer (:attr:`optimizer`, which :meth:`learn`, :meth:`save_state` and
        :meth:`load_state` use)."""
        import copy

        import torch

        cfg = self.config
        if cfg.use_lora:
            self.model = self.add_lora(self.model)
        self._ref_model = copy.deepcopy(self.model).eval() if cfg.kl_coef > 0 and not cfg.use_lora else None
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.critic = self._make_critic()

    # ---------------------------------------------------------------------- the update
    def learn(self, step: int, episodes: list[Any], *, off_policy: bool = False, prefix_is: bool = False) -> dict[str, Any]:
        """One RL update on ``episodes`` (infra failures already dropped); returns its metrics row
        (without timings). ``off_policy``: the episodes' log-probs are not the learner's own (see
        the module docstring), so ``π_old`` is recomputed and every token is TIS-weighted;
        ``prefix_is``: by the truncated ratio of its whole prefix instead of its own
        (:func:`turngym.trainers.losses.prefix_behaviour`)."""
        import torch

        from turngym.agents.render import render_episode
        from turngym.rollout import to_turn_table
        from turngym.trainers.advantages import compute_advantages, estimator_inputs

        off_policy = off_policy or self.cpu_autocast  # the sampler ran in float32, the update runs in bf16
        from turngym.trainers.batch import collate, table_token_advantages, token_logprobs
        from turngym.trainers.critic import whiten
        from turngym.trainers.engine import (
            logprob_mismatch,
            recompute_logprobs,
            sample_mismatch,
            tis_pg_loss,
            use_trainer_old,
        )
        from turngym.trainers.losses import clipped_pg_loss, kl_penalty, prefix_behaviour
        from turngym.trainers.providers import fill_inputs

        if self.optimizer is None:
            raise ConfigError("learn() updates with the RL optimizer: call rl_setup() first")
        cfg, opt = self.config, self.optimizer
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
        self.last_batch = (episodes, np.split(adv, np.flatnonzero(table["last"])[:-1] + 1))
        tok_adv = table_token_advantages(samples, table, adv)
        engine_stats: dict[str, float] = {}
        # π_old is the learner's; the rollout's log-probs only weight the tokens (TIS). With one
        # minibatch and one epoch the update's own forward pass runs on the unchanged weights, so
        # its detached log-probs *are* π_old: no second pass over the batch (a quarter of an async
        # step's learner time, measured). Dropout would make that pass a perturbed π_old: recompute.
        fused_old = off_policy and cfg.minibatches == 1 and cfg.ppo_epochs == 1 and not has_dropout(self.model)
        seen_old: list[tuple[Any, Any]] = []
        if off_policy and not fused_old:
            trainer_old = recompute_logprobs(self.model, samples, self.pad_id, self.device, micro_batch_size=cfg.micro_batch_size,
                                             autocast=self.autocast)
            engine_stats = sample_mismatch(samples, trainer_old, cap=cfg.tis_cap)
        self.model.train()
        if self.critic is not None:
            self.critic.train()
        stats: dict[str, list[float]] = {"loss": [], "pg_loss": [], "kl": [], "clip_frac": [], "ratio": [], "ratio_std": [], "approx_kl": [],
                                         "grad_norm": [], "tis_weight": []}
        order = np.arange(len(samples))
        skipped = 0
        for epoch in range(cfg.ppo_epochs):
            seeded_rng(cfg.seed, 3, step, epoch).shuffle(order)
            for mb in np.array_split(order, cfg.minibatches):
                opt.zero_grad(set_to_none=True)
                if self.critic is not None:
                    self.critic.zero_grad()
                total_tokens = sum(sum(samples[i].loss_mask) for i in mb)
                nonfinite: str | None = None
                for chunk in by_length(mb, samples, cfg.micro_batch_size, cfg.micro_batch_tokens):
                    batch = collate([samples[i] for i in chunk], [tok_adv[i] for i in chunk], self.pad_id, self.device)
                    weight = batch.n_tokens / max(total_tokens, 1)
                    value_loss = None
                    with self.autocast(), self._critic_reading():
                        logp = token_logprobs(self.model, batch, chunk_tokens=cfg.logit_chunk_tokens)
                        if self.critic is not None and critic_targets is not None:  # the shared head reads this very pass
                            value_loss, vdiag = self.critic.loss(self.model, batch, [critic_targets[i] for i in chunk])
                            stats.setdefault("value_loss", []).append(float(value_loss.item()))
                            stats.setdefault("value_clip_frac", []).append(vdiag["value_clip_frac"])
                    if fused_old:
                        engine_logp = batch.old_logp_next
                        batch.old_logp_next = logp.detach().to(engine_logp.dtype)
                        where = batch.mask_next > 0
                        seen_old.append((batch.old_logp_next[where].double().cpu(), engine_logp[where].double().cpu()))
                    elif off_policy:
                        engine_logp = use_trainer_old(batch, [trainer_old[i] for i in chunk])
                    if off_policy:
                        if prefix_is:
                            engine_logp = prefix_behaviour(batch.old_logp_next, engine_logp, batch.mask_next)
                        pg, diag = tis_pg_loss(logp, batch.old_logp_next, engine_logp, batch.adv_next, batch.mask_next,
                                               clip_low=cfg.clip_low, clip_high=cfg.clip_high, cap=cfg.tis_cap)
                        stats["tis_weight"].append(diag["tis_weight"])
                    else:
                        pg, diag = clipped_pg_loss(logp, batch.old_logp_next, batch.adv_next, batch.mask_next, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
                    loss = pg
                    if value_loss is not None:
                        loss = loss + cfg.value_coef * value_loss
                    if cfg.kl_coef > 0:
                        with torch.no_grad(), self.reference(), self.autocast():
                            ref_logp = token_logprobs(self.model, batch, chunk_tokens=cfg.logit_chunk_tokens)
                        kl = kl_penalty(logp, ref_logp, batch.mask_next)
                        loss = loss + cfg.kl_coef * kl
                        stats["kl"].append(float(kl.item()))
                    if not torch.isfinite(loss.detach()).item():  # nothing of this minibatch reaches the weights
                        nonfinite = f"a non-finite loss ({float(loss.item())})"
                        break
                    (loss * weight).backward()
                    stats["loss"].append(float(loss.item()))
                    stats["pg_loss"].append(float(pg.item()))
                    stats["clip_frac"].append(diag["clip_frac"])
                    stats["ratio"].append(diag["ratio"])
                    stats["ratio_std"].append(diag["ratio_std"])
                    stats["approx_kl"].append(diag["approx_kl"])
                norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], cfg.max_grad_norm)
                if nonfinite is None and not math.isfinite(float(norm)):
                    nonfinite = f"a non-finite gradient (norm {float(norm)})"
                if nonfinite is not None:  # skip the step: one NaN would reach every weight and the optimizer's moments
                    skipped += 1
                    self.log(f"warning: RL step {step + 1}: skipped an update on {nonfinite}; the weights are unchanged")
                    opt.zero_grad(set_to_none=True)
                    if self.critic is not None:
                        self.critic.zero_grad()
                    continue
                stats["grad_norm"].append(float(norm))
                opt.step()
                if self.critic is not None:
                    stats.setdefault("critic_grad_norm", []).append(self.critic.step())

        if seen_old:
            trainer, engine = torch.cat([t for t, _ in seen_old]), torch.cat([e for _, e in seen_old])
            engine_stats = logprob_mismatch(trainer, engine, torch.ones_like(trainer), cap=cfg.tis_cap)
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
            "tokens": int(sum(sum(s.loss_mask) for s in samples)),
            "skipped_updates": skipped,
            **engine_stats,
        }

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
        with self.autocast():
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
        self.critic_last = (values, ret)
        return targets, {"critic_ev": explained_variance(values, ret), "critic_ev_mc": explained_variance(values, mc),
                         "value_mean": float(values.mean()), "value_target_mean": float(ret.mean())}

    # ---------------------------------------------------------------------- helpers
    @property
    def cpu_autocast(self) -> bool:
        """bf16 autocast on a CPU (``config.cpu_bf16``): the update's log-probs are not the float32 sampler's."""
        return self.autocast_on and self.device == "cpu"

    def autocast(self) -> Any:
        import contextlib

        import torch

        return torch.autocast(self.device, dtype=torch.bfloat16) if self.autocast_on else contextlib.nullcontext()

    def reference(self) -> Any:
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

    # ---------------------------------------------------------------------- state
    def trainable_state(self) -> dict[str, Any]:
        """The weights an update changes: the LoRA adapters, or every weight."""
        if self.config.use_lora:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.model)
        return self.model.state_dict()

    def save_state(self, tmp: Path) -> None:
        """Write the trainable weights, the optimizer and the critic into the checkpoint directory ``tmp``."""
        import torch

        state = self.trainable_state()
        check_finite(state, "the trained weights")
        if self.critic is not None:
            check_finite(self.critic.state_dict(), "the critic's weights")
        optimizer = self.optimizer.state_dict()
        check_finite(optimizer.get("state", {}), "the optimizer's moments")
        torch.save(state, tmp / "trainable.pt")
        torch.save(optimizer, tmp / "optimizer.pt")
        if self.critic is not None:  # head, separate trunk and the critic's optimizer: resume continues it exactly
            torch.save(self.critic.state_dict(), tmp / "critic.pt")

    def load_state(self, source: Path, fix: str) -> None:
        """Weights (or adapters), optimizer and critic of the verified checkpoint ``source`` into the
        live objects; ``fix`` says what to do when a file does not fit this run."""
        import torch

        for name, target in (("trainable.pt", self.model), ("optimizer.pt", self.optimizer)):
            file = source / name
            try:
                state = torch.load(file, map_location=self.device)
                if name == "optimizer.pt":
                    self.optimizer.load_state_dict(state)
                elif self.config.use_lora:
                    from peft import set_peft_model_state_dict

                    set_peft_model_state_dict(target, state)
                else:
                    target.load_state_dict(state)
            except Exception as exc:  # a file that verifies but does not fit this run's model
                raise ArtifactError(f"{file} cannot be loaded into this run ({type(exc).__name__}: {exc}); {fix}") from exc
        if self.critic is not None:
            file = source / "critic.pt"
            try:
                self.critic.load_state_dict(torch.load(file, map_location=self.device))
            except Exception as exc:  # missing (a checkpoint of a run without a critic) or damaged
                raise ArtifactError(f"{file} cannot be loaded into this run's critic ({type(exc).__name__}: {exc}); {fix}") from exc

    def save_model(self, path: Path) -> None:
        """The current weights and tokenizer as a normal HF model directory."""
        check_finite(self.model.state_dict(), "the model's weights")
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
