"""Rollout episodes + per-turn advantages → padded token tensors for the loss.

Each episode is rendered once as one sequence with :func:`turngym.agents.render.render_episode`
(the generated ids spliced in verbatim, a mask over the policy's tokens), and every token of a
turn's action carries that turn's advantage. This is where "per-step rewards reach the loss":
the advantage of row (episode, turn) lands exactly on that turn's tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError

__all__ = ["LOGIT_CHUNK_TOKENS", "TokenBatch", "collate", "table_token_advantages", "token_advantages", "token_logprobs"]


def token_advantages(sample: Any, turn_advantages: Sequence[float]) -> list[float]:
    """Per-token advantages of one rendered episode: each action span gets its turn's value."""
    adv = [0.0] * len(sample.input_ids)
    for turn, (start, end) in sample.turn_spans.items():
        if turn >= len(turn_advantages):
            raise ConfigError(f"sample of {sample.episode_id!r} has turn {turn} but only {len(turn_advantages)} advantages")
        adv[start:end] = [float(turn_advantages[turn])] * (end - start)
    return adv


def table_token_advantages(samples: Sequence[Any], table: Mapping[str, Any], advantages: Sequence[float]) -> list[list[float]]:
    """Per-token advantages of each rendered sample from a turn table's token spans.

    ``table`` is :func:`turngym.rollout.to_turn_table` of the episodes with ``samples=`` these
    samples: row ``i``'s advantage lands on tokens ``token_start[i]:token_end[i]`` of sample
    ``sample[i]``, so each turn's advantage reaches exactly its own action tokens whatever the
    order or number of rows.
    """
    where = [np.asarray(table[k]) for k in ("sample", "token_start", "token_end")]
    if len(advantages) != len(where[0]):
        raise ConfigError(f"{len(advantages)} advantages for a table of {len(where[0])} turns")
    if where[0].size and int(where[0].min()) < 0:
        raise ConfigError("the turn table has no token spans: build it with to_turn_table(episodes, samples=...)")
    out = [np.zeros(len(s.input_ids)) for s in samples]
    for s, a, b, v in zip(*(w.tolist() for w in where), np.asarray(advantages, dtype=np.float64).tolist()):
        out[s][a:b] = v
    return [o.tolist() for o in out]


@dataclass
class TokenBatch:
    """Right-padded tensors; position ``t`` of the ``*_next`` tensors describes token ``t + 1``."""

    input_ids: Any
    attention_mask: Any
    mask_next: Any
    old_logp_next: Any
    adv_next: Any
    right_padded: bool = False
    """Every row is its tokens then padding (as :func:`collate` builds it): under a causal mask
    no real token sees the padding, so the model can run without the padding mask."""
    allowed: tuple[Any, Any, Any] | None = None
    """Constrained positions, if any: ``(rows, cols, ids)`` in ``*_next`` coordinates, ``ids``
    padded with -1 — the tokens decoding allowed there, which :func:`token_logprobs`
    renormalizes over (the sampling distribution of a constrained rollout)."""

    @property
    def n_tokens(self) -> int:
        return int(self.mask_next.sum().item())


def collate(samples: Sequence[Any], advantages: Sequence[Sequence[float]] | None, pad_id: int, device: Any = "cpu") -> TokenBatch:
    """Pad rendered samples (and their per-token advantages) into one :class:`TokenBatch`."""
    import torch

    n = len(samples)
    width = max(len(s.input_ids) for s in samples)
    ids = np.full((n, width), pad_id, np.int64)
    attn = np.zeros((n, width), np.int64)
    mask = np.zeros((n, width), np.float32)
    old = np.zeros((n, width), np.float32)
    adv = np.zeros((n, width), np.float32)
    for i, s in enumerate(samples):
        k = len(s.input_ids)
        ids[i, :k] = s.input_ids
        attn[i, :k] = 1
        mask[i, :k] = s.loss_mask
        old[i, :k] = s.logprobs
        if advantages is not None:
            adv[i, :k] = advantages[i]

    def t(x: np.ndarray) -> Any:
        return torch.from_numpy(x).to(device)

    return TokenBatch(
        input_ids=t(ids),
        attention_mask=t(attn),
        mask_next=t(mask[:, 1:]),
        old_logp_next=t(old[:, 1:]),
        adv_next=t(adv[:, 1:]),
        right_padded=True,
        allowed=_allowed(samples, mask, t),
    )


def _allowed(samples: Sequence[Any], mask: np.ndarray, t: Any) -> tuple[Any, Any, Any] | None:
    """The samples' constrained positions that are trained on, as :attr:`TokenBatch.allowed`."""
    where = [(i, p, a) for i, s in enumerate(samples) for p, a in getattr(s, "allowed", {}).items() if p > 0 and mask[i, p]]
    if not where:
        return None
    ids = np.full((len(where), max(len(w[2]) for w in where)), -1, np.int64)
    for k, (_, _, a) in enumerate(where):
        ids[k, : len(a)] = a
    rows = np.fromiter((w[0] for w in where), np.int64, len(where))
    cols = np.fromiter((w[1] - 1 for w in where), np.int64, len(where))
    return t(rows), t(cols), t(ids)


#: Masked positions whose logits :func:`token_logprobs` computes at once (``TrainConfig.logit_chunk_tokens``).
LOGIT_CHUNK_TOKENS = 1024


def token_logprobs(model: Any, batch: TokenBatch, *, only_masked: bool = True, chunk_tokens: int = LOGIT_CHUNK_TOKENS) -> Any:
    """log π(token_{t+1} | tokens_≤t), shape ``(n, width − 1)``.

    With ``only_masked`` (the default) the vocabulary projection and softmax run only at the
    positions of ``batch.mask_next`` — the policy's own tokens — and every other position is 0.
    In multi-turn episodes most tokens are observations, so this skips most of the largest
    matrix product of a small model (a training micro-batch ×2.4 faster on Household and Shop
    demonstrations with the tiny model, ``benchmarks/bench_train.py``) and most of the logits
    memory of a large-vocabulary one. Models whose head is more than a linear layer
    (logit soft-capping or scaling) take the full path, as does ``only_masked=False``.

    ``chunk_tokens`` bounds the logits alive at once: the head and the softmax run on that many
    masked positions at a time, each chunk under activation checkpointing, so neither the
    forward nor the backward ever holds more than one chunk's ``chunk_tokens × vocabulary``
    logits (recomputed in backward: one extra head product per chunk). A SmolLM2 micro-batch of
    long captured episodes holds ~10k policy tokens: 2 GB of float32 logits, several times that
    with the softmax and its gradient, all at once without chunks. ``0`` = every masked
    position at once (no recomputation). Same values either way (to float rounding).

    Positions in ``batch.allowed`` (constrained decoding) get the log-prob renormalized over
    their allowed tokens: the distribution the rollout sampled from.
    """
    import torch

    targets = batch.input_ids[:, 1:]
    # Right padding never reaches a real token through a causal mask, so a right-padded batch
    # needs no padding mask; without one SDPA takes its fused causal kernel (exactly equal).
    attn = None if batch.right_padded else batch.attention_mask
    if only_masked and _plain_head(model):
        hidden = model.get_decoder()(input_ids=batch.input_ids, attention_mask=attn).last_hidden_state[:, :-1]
        where = batch.mask_next > 0
        head = model.get_output_embeddings()
        rows, picked_targets = hidden[where], targets[where]
        if chunk_tokens > 0:
            picked = _chunked_logprobs(head, rows, picked_targets, chunk_tokens)
        else:
            picked = torch.log_softmax(head(rows).float(), dim=-1).gather(-1, picked_targets.unsqueeze(-1)).squeeze(-1)
        if batch.allowed is not None:  # row k of `rows` is the k-th masked position, row-major
            a_rows, cols, ids = batch.allowed
            k = (where.flatten().cumsum(0) - 1).view(where.shape)[a_rows, cols]
            picked = picked.index_put((k,), _constrained(head(rows[k]).float(), targets[a_rows, cols], ids))
        out = torch.zeros(targets.shape, dtype=picked.dtype, device=picked.device)
        return out.masked_scatter(where, picked)
    logits = model(input_ids=batch.input_ids, attention_mask=attn).logits[:, :-1].float()
    out = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if batch.allowed is not None:
        rows, cols, ids = batch.allowed
        out = out.index_put((rows, cols), _constrained(logits[rows, cols], targets[rows, cols], ids))
    return out


def _picked_logprobs(head: Any, hidden: Any, targets: Any) -> Any:
    """``log_softmax(head(hidden))`` at ``targets``, one value per row (the logits die here)."""
    import torch

    logits = head(hidden).float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def _chunked_logprobs(head: Any, hidden: Any, targets: Any, chunk: int) -> Any:
    """:func:`_picked_logprobs` over ``chunk`` rows at a time; under autograd each chunk is
    checkpointed (backward keeps its hidden rows, not its logits, and recomputes them)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    parts = []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        parts.append(checkpoint(_picked_logprobs, head, h, t, use_reentrant=False) if grad else _picked_logprobs(head, h, t))
    if not parts:
        return hidden.new_zeros(0, dtype=torch.float32)
    return torch.cat(parts)


def _constrained(logits: Any, targets: Any, allowed: Any) -> Any:
    """Log-softmax of each row of ``logits`` over its ``allowed`` ids (-1 = padding), at ``targets``."""
    import torch

    sub = logits.gather(-1, allowed.clamp(min=0)).masked_fill(allowed < 0, float("-inf"))
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(sub, dim=-1)


def _plain_head(model: Any) -> bool:
    """True when logits are exactly ``lm_head(decoder(x))`` (no soft-capping or scaling)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "get_decoder") or not hasattr(model, "get_output_embeddings"):
        return False
    if any(getattr(config, k, None) not in (None, 1.0) for k in ("final_logit_softcapping", "logit_scale", "logits_scaling")):
        return False
    try:
        return model.get_decoder() is not None and model.get_output_embeddings() is not None
    except (AttributeError, NotImplementedError):
        return False
