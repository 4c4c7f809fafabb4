"""GiGPO: Group-in-Group Policy Optimization (Feng et al., 2025, "Group-in-Group Policy
Optimization for LLM Agent Training", arXiv 2505.10978; reference code: verl-agent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from turngym.core.errors import ConfigError
from turngym.trainers.advantages._segments import (
    EPS,
    check_unit,
    combine_codes,
    discounted_returns,
    normalize_in_segments,
)
from turngym.trainers.advantages.grpo import episode_group_advantages
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["gigpo"]

_MODES = ("std", "mean")


def gigpo(
    turns: TurnTable | Mapping[str, Any],
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    normalize: Literal["std", "mean"] = "std",
    eps: float = EPS,
) -> np.ndarray:
    """GiGPO: ``A = A_E + ω · A_S`` — an episode-level and a step-level group advantage.

    * ``A_E`` (episode level): the GRPO advantage of the episode return, one value per
      episode, normalized among the episodes of the group, broadcast to its turns.
    * ``A_S`` (step level): the per-turn discounted return ``G_t = r_t + γ G_{t+1}``,
      normalized within its *step group*: the rows of the same ``group`` whose action was
      taken in the same anchor state (``state_before``). Singleton step groups get 0.

    Grouping by state rather than by turn index is what keeps the step baseline unbiased when
    the agent decides when to stop (verl RFC #7244): two turns are compared only when they
    acted in the same situation. Unlike verl-agent's default (``compute_mean_std_cross_steps``),
    the episode statistics count each episode once, so long episodes do not weigh more.

    Args:
        gamma: discount γ of the step returns (0.95 in every GiGPO script).
        omega: weight ω of the step advantage.
        normalize: ``"std"`` (z-score, "GiGPO w/ std") or ``"mean"`` (mean-centred only,
            "GiGPO w/o std"); applies to both levels.
        eps: added to the std.

    Requires the ``state_before`` column.

    Example: two episodes from the same start state ``s``; episode 0 wastes a turn in ``s``
    before succeeding from ``s`` again, episode 1 fails from ``s``. γ = 0.5:

    >>> turns = {
    ...     "episode":   [0, 0, 1],
    ...     "group":     [0, 0, 0],
    ...     "turn":      [0, 1, 0],
    ...     "reward":    [0.0, 1.0, 0.0],
    ...     "state_before": ["s", "s", "s"],
    ... }
    >>> gigpo(turns, gamma=0.5, normalize="mean").tolist()   # A_E = ±0.5; G = 0.5, 1, 0 (mean 0.5)
    [0.5, 1.0, -1.0]
    """
    if normalize not in _MODES:
        raise ConfigError(f"gigpo: normalize must be one of {_MODES}, got {normalize!r}")
    check_unit("gamma", gamma)
    table = as_turn_table(turns)
    table.require("gigpo", "state_before")
    scale = normalize == "std"
    episode_adv = episode_group_advantages(table, table.episode_returns, scale=scale, eps=eps)[table.episode]
    step_groups = combine_codes(table.group, table.state_before)  # type: ignore[arg-type]
    step_adv = normalize_in_segments(discounted_returns(table, gamma), step_groups, scale=scale, eps=eps)
    return episode_adv + omega * step_adv
