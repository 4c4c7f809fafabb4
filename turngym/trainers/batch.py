"""Rollout episodes + per-turn advantages → padded token tensors for the loss.

Each episode is rendered once as one sequence with :func:`turngym.agents.render.render_episode`
(the generated ids spliced in verbatim, a mask over the policy's tokens), and every token of a
turn's action carries that turn's advantage. This is where "per-step rewards reach the loss":
the advantage of row (episode, turn) lands exactly on that turn's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError

__all__ = ["TokenBatch", "collate", "token_advantages", "token_logprobs"]


def token_advantages(sample: Any, turn_advantages: Sequence[float]) -> list[float]:
    """Per-token advantages of one rendered episode: each action span gets its turn's value."""
    adv = [0.0] * len(sample.input_ids)
    for turn, (start, end) in sample.turn_spans.items():
        if turn >= len(turn_advantages):
            raise ConfigError(f"sample of {sample.episode_id!r} has turn {turn} but only {len(turn_advantages)} advantages")
        adv[start:end] = [float(turn_advantages[turn])] * (end - start)
    return adv


@dataclass
class TokenBatch:
    """Right-padded tensors; position ``t`` of the ``*_next`` tensors describes token ``t + 1``."""

    input_ids: Any
    attention_mask: Any
    mask_next: Any
    old_logp_next: Any
    adv_next: Any

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
    )


def token_logprobs(model: Any, batch: TokenBatch) -> Any:
    """log π(token_{t+1} | tokens_≤t) for every position (shape ``(n, width − 1)``)."""
    import torch

    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
