"""Policy-gradient losses over token log-probabilities (pure torch functions).

Every function takes per-token tensors of shape ``(batch, tokens)`` and a 0/1 ``mask`` over the
policy's own tokens, and returns a scalar. Aggregation is the *token mean over the whole batch*
(Σ over masked tokens / number of masked tokens), so long and short actions weigh each token
the same (DAPO / Dr.GRPO's fix for the per-sequence mean's length bias).
"""

from __future__ import annotations

from typing import Any

__all__ = ["clipped_pg_loss", "kl_penalty", "masked_mean", "token_nll"]


def masked_mean(values: Any, mask: Any) -> Any:
    """Σ values·mask / max(Σ mask, 1)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def clipped_pg_loss(logp: Any, old_logp: Any, advantages: Any, mask: Any, *, clip_low: float = 0.2, clip_high: float = 0.2) -> tuple[Any, dict[str, float]]:
    """PPO's clipped surrogate (Schulman et al., 2017), negated for minimization.

    ``L = −mean_t min(ρ_t A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high) A_t)`` with
    ``ρ_t = exp(log π_θ − log π_old)``. With one update per rollout ρ = 1 and this is plain
    REINFORCE with the given advantages. ``clip_high > clip_low`` is DAPO's clip-higher.

    Returns the loss and diagnostics (clip fraction, mean ratio).
    """
    import torch

    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -masked_mean(torch.minimum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_frac = masked_mean((unclipped != clipped).float(), mask).item()
        mean_ratio = masked_mean(ratio, mask).item()
    return loss, {"clip_frac": clip_frac, "ratio": mean_ratio}


def kl_penalty(logp: Any, ref_logp: Any, mask: Any) -> Any:
    """Token-mean KL(π_θ ‖ π_ref) with the low-variance, always-positive k3 estimator.

    ``k3 = exp(r) − r − 1`` with ``r = log π_ref − log π_θ`` (Schulman, "Approximating KL
    divergence"; verl's ``low_var_kl``). Added to the loss as ``β · kl``, never folded into
    the reward, so it does not pass through the advantage normalization.
    """
    import torch

    r = ref_logp - logp
    return masked_mean(torch.exp(r) - r - 1.0, mask)


def token_nll(logp: Any, mask: Any) -> Any:
    """Token-mean negative log-likelihood (imitation / SFT)."""
    return -masked_mean(logp, mask)
