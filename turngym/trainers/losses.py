"""Policy-gradient losses over token log-probabilities (pure torch functions).

Every function takes per-token tensors of shape ``(batch, tokens)`` and a 0/1 ``mask`` over the
policy's own tokens, and returns a scalar. Aggregation is the *token mean over the whole batch*
(Σ over masked tokens / number of masked tokens), so long and short actions weigh each token
the same (DAPO / Dr.GRPO's fix for the per-sequence mean's length bias).
"""

from __future__ import annotations

from typing import Any

__all__ = ["clipped_pg_loss", "kl_penalty", "masked_mean", "policy_movement", "prefix_behaviour", "token_nll"]


def masked_mean(values: Any, mask: Any) -> Any:
    """Σ values·mask / max(Σ mask, 1)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def clipped_pg_loss(logp: Any, old_logp: Any, advantages: Any, mask: Any, *, clip_low: float = 0.2, clip_high: float = 0.2) -> tuple[Any, dict[str, float]]:
    """PPO's clipped surrogate (Schulman et al., 2017), negated for minimization.

    ``L = −mean_t min(ρ_t A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high) A_t)`` with
    ``ρ_t = exp(log π_θ − log π_old)``. With one update per rollout ρ = 1 and this is plain
    REINFORCE with the given advantages. ``clip_high > clip_low`` is DAPO's clip-higher.

    Returns the loss and diagnostics: the clip fraction and :func:`policy_movement`'s mean ratio,
    its spread and the approximate KL(π_old ‖ π_θ).
    """
    import torch

    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -masked_mean(torch.minimum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_frac = masked_mean((unclipped != clipped).float(), mask).item()
    return loss, {"clip_frac": clip_frac, **policy_movement(logp, old_logp, mask)}


def policy_movement(logp: Any, old_logp: Any, mask: Any) -> dict[str, float]:
    """How far π_θ has moved from the rollout's π_old on the masked tokens, from the ratios the
    loss computes anyway (no extra forward pass).

    ``ratio`` = mean ρ, ``ratio_std`` = its standard deviation over tokens, ``approx_kl`` = the
    k3 estimate of KL(π_old ‖ π_θ), mean of ``(ρ − 1) − log ρ`` (Schulman, "Approximating KL
    divergence"; ≥ 0 token by token). With one minibatch and one epoch the update is on-policy and
    all three read ρ ≡ 1 (``ratio_std`` = ``approx_kl`` = 0) whatever the learning rate; with
    ``minibatches > 1`` or ``ppo_epochs > 1`` every later minibatch is scored by weights the earlier
    ones already changed, so these numbers measure how far one RL step moves the policy — the
    diagnosis of an update too small to matter (ratio ≈ 1) or too large (approx_kl ≫ 0.01).
    """
    import torch

    with torch.no_grad():
        log_ratio = (logp - old_logp).float()
        ratio = torch.exp(log_ratio)
        mean = masked_mean(ratio, mask)
        return {
            "ratio": mean.item(),
            "ratio_std": masked_mean((ratio - mean) ** 2, mask).sqrt().item(),
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask).item(),
        }


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


def prefix_behaviour(old_logp: Any, behaviour_logp: Any, mask: Any) -> Any:
    """Behaviour log-probs that make :func:`~turngym.trainers.engine.tis_weights` the *prefix* ratio.

    Per-token TIS weights token ``i`` by ``π_old(a_i) / π_b(a_i)``: it corrects which action was
    taken, not how likely the learner was to reach the state it was taken in. When a batch's
    early turns come from an older version and the episode's course depends on them (its length,
    the states it visits), later turns are visited with the older policy's odds, and the
    gradient is biased (measured: :mod:`turngym.study.async_bias`). Per-decision importance
    sampling weights token ``i`` by the product of the ratios of every action token up to it,
    ``Π_{j ≤ i} π_old(a_j) / π_b(a_j)``. Returned as ``old − cumsum((old − b)·mask)``, so
    ``exp(old − returned)`` is that product, truncated at the same cap downstream. On turns
    whose prefix was all sampled by the learner's version the product is the per-token ratio.
    """
    import torch

    with torch.no_grad():
        return old_logp - torch.cumsum((old_logp - behaviour_logp) * (mask > 0), dim=1)
