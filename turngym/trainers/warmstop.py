"""A warm start that leaves room to explore: watch imitation on held-out demonstrations and stop it early.

Imitating a deterministic oracle drives a small model toward a deterministic policy: in
``docs/study/smollm2-rl-cpu`` 85–93% of the tokens the warm-started SmolLM2 sampled had p > 0.99,
so the members of a group played the same episode and RL had nothing to compare. Two stopping
rules, both read on demonstrations held out of imitation (``warmup_holdout``):

- **NLL patience** (``warmup_patience``): stop after that many checks without a lower held-out
  NLL — the usual early stop, which ends imitation once it only memorises.
- **Entropy floor** (``warmup_entropy_floor``): stop once the policy's mean predictive entropy
  per action token on the held-out demonstrations falls below the floor — the policy still
  knows the format but keeps some spread over actions for the groups to differ.

:class:`WarmStop` computes both (exact entropy from the full softmax, on a few dozen held-out
demonstrations, every ``warmup_check_every`` steps) and logs them as ``metrics.jsonl`` rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["WarmStop", "heldout_stats"]


def heldout_stats(model: Any, samples: Sequence[Any], pad_id: int, device: Any, *, micro_batch_size: int = 8,
                  autocast: Callable[[], Any] | None = None) -> dict[str, float]:
    """Mean NLL of the demonstrated action tokens and mean entropy of the model's predictive
    distribution at those positions (nats per token), in eval mode without gradients."""
    import contextlib

    import torch

    from turngym.trainers.batch import collate

    was_training = model.training
    model.eval()
    nll = ent = 0.0
    n = 0
    try:
        with torch.no_grad():
            for start in range(0, len(samples), micro_batch_size):
                batch = collate(samples[start:start + micro_batch_size], None, pad_id, device)
                with (autocast or contextlib.nullcontext)():
                    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
                where = batch.mask_next > 0
                logp = torch.log_softmax(logits[where].float(), dim=-1)
                targets = batch.input_ids[:, 1:][where]
                nll -= float(logp.gather(-1, targets.unsqueeze(-1)).sum())
                ent -= float((logp.exp() * logp).sum())
                n += int(where.sum())
    finally:
        model.train(was_training)
    return {"heldout_nll": nll / max(n, 1), "heldout_entropy": ent / max(n, 1)}


class WarmStop:
    """Decides when imitation stops (see the module docstring).

    Args:
        samples: the held-out demonstrations, rendered.
        patience: checks without a lower held-out NLL before stopping (0 = never on NLL).
        entropy_floor: stop once the held-out entropy is below it (0 = never on entropy).
        measure: ``measure(model, samples)`` → :func:`heldout_stats`' dict.
    """

    def __init__(self, samples: Sequence[Any], *, patience: int, entropy_floor: float,
                 measure: Callable[[Any, Sequence[Any]], dict[str, float]]) -> None:
        self.samples = samples
        self.patience = patience
        self.entropy_floor = entropy_floor
        self.measure = measure
        self.best = float("inf")
        self.since_best = 0
        self.reason: str | None = None
        """Why imitation stopped early (None: it ran all its steps)."""

    def check(self, step: int, model: Any) -> tuple[bool, dict[str, Any]]:
        """Measure ``model`` at imitation step ``step``: (stop now?, the metrics row)."""
        stats = self.measure(model, self.samples)
        if stats["heldout_nll"] < self.best - 1e-4:
            self.best, self.since_best = stats["heldout_nll"], 0
        else:
            self.since_best += 1
        if self.entropy_floor and stats["heldout_entropy"] < self.entropy_floor:
            self.reason = f"held-out entropy {stats['heldout_entropy']:.3f} < floor {self.entropy_floor}"
        elif self.patience and self.since_best >= self.patience:
            self.reason = f"held-out NLL not below {self.best:.4f} for {self.since_best} checks"
        row = {"phase": "warmup", "step": step, **{k: round(v, 5) for k, v in stats.items()}}
        if self.reason:
            row["stopped"] = self.reason
        return self.reason is not None, row
