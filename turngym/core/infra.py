"""The one step that reports an infrastructure failure in place of a real env step.

When the thing that should have stepped the env is gone (a Ray actor died, a server connection
was lost, the model server never answered), there is no env to ask for a transition, yet the
rollout must go on and the episode must end *unscored*. Every runner and client builds that
step here, so an infrastructure failure looks the same whichever path it took: the episode
ends (``terminated``), reward 0, zero signals, the last known state key, ``info["infra_error"]``
set and an ``infra_error`` outcome that trainers and summaries drop instead of scoring.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["INFRA_OUTCOME", "infra_step"]

#: The outcome of an episode ended by an infrastructure failure (never scored).
INFRA_OUTCOME: Mapping[str, Any] = {"reward": 0.0, "success": False, "reason": "infra_error"}


def infra_step(
    why: str, *, turn: int, state_key: str, signals: Mapping[str, float], source: str = "environment"
) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """A terminal ``(obs, reward, terminated, truncated, info)`` saying ``why`` the step could not run.

    Args:
        why: the failure, as the runner or client saw it (stored as ``info["infra_error"]``).
        turn: the turn number this step would have had.
        state_key: the last known state key (the failed step changed nothing anyone observed).
        signals: the env's signals at zero (``reward_spec.zeros()``), so every row has them.
        source: who failed, shown in the observation (``"environment"``, ``"policy"``).
    """
    info = {
        "turn": turn,
        "signals": dict(signals),
        "state_key": state_key,
        "action_valid": True,
        "invalid_reason": None,
        "infra_error": why,
        "outcome": dict(INFRA_OUTCOME),
    }
    return f"[{source} infrastructure error: {why}]", 0.0, True, False, info
