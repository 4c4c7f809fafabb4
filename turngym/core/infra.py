"""The one step that reports an infrastructure failure in place of a real env step.

When the thing that should have stepped the env is gone (a Ray actor died, a server connection
was lost, the model server never answered), there is no env to ask for a transition, yet the
rollout must go on and the episode must end *unscored*. Every runner and client builds that
step here, so an infrastructure failure looks the same whichever path it took: the episode
ends (``terminated``), reward 0, zero signals, the last known state key, ``info["infra_error"]``
set and an ``infra_error`` outcome that trainers and summaries drop instead of scoring.

**An env bug is an infrastructure error too.** An env's ``step`` must never raise on an
action (a malformed or hostile action is ``action_valid=False`` or a failed verdict: the
agent's failure). So an exception that *does* escape ``step`` is the env's bug, not the
agent's doing, and a rollout must neither die of it (one action would kill a whole batch,
a whole training run) nor score it as a failed episode (the agent would be punished for the
env's bug). :func:`guarded_step` is what every rollout path steps with (in-process, inside
a Ray actor, and for server envs in :class:`~turngym.rollout.steppers.RemoteStepper`): the
exception becomes :func:`env_bug_step`, an infra step whose ``info["infra_traceback"]``
keeps the traceback for whoever fixes the env, and the other episodes go on. Runs bound how
many of these they accept (``max_infra_error_rate``, :mod:`turngym.rollout.metrics`), so a
broken env stops a run with an error instead of quietly training on the survivors.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

__all__ = ["INFRA_OUTCOME", "MAX_TRACEBACK_CHARS", "env_bug", "env_bug_step", "guarded_step", "infra_step"]

#: The most of an env bug's traceback kept with its step (the tail: where it was raised).
MAX_TRACEBACK_CHARS = 20_000

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


def env_bug(exc: BaseException, *, where: str = "step") -> tuple[str, str]:
    """``(why, traceback)`` for an exception an env raised where it must not (``step``, ``reset``).

    ``why`` is one line for ``info["infra_error"]`` (the exception's class and message, cut to
    500 characters); the traceback is its last :data:`MAX_TRACEBACK_CHARS` characters.
    """
    message = str(exc)
    why = f"env bug: {where}() raised {type(exc).__name__}" + (f": {message}" if message else "")
    tb = getattr(exc, "remote_traceback", None) or "".join(traceback.format_exception(exc))
    return why[:500], tb[-MAX_TRACEBACK_CHARS:]


def env_bug_step(exc: BaseException, *, turn: int, state_key: str, signals: Mapping[str, float]) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """The infra step for an env whose ``step`` raised ``exc``; the traceback is in ``info["infra_traceback"]``."""
    why, tb = env_bug(exc)
    obs, reward, terminated, truncated, info = infra_step(why, turn=turn, state_key=state_key, signals=signals)
    info["infra_traceback"] = tb
    return obs, reward, terminated, truncated, info


def guarded_step(env: Any, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """``env.step(action)``, or :func:`env_bug_step` when it raises (see the module docstring).

    ``Exception`` only: ``KeyboardInterrupt`` and ``SystemExit`` still stop the run.
    """
    try:
        return env.step(action)
    except Exception as exc:  # an env bug: this episode ends unscored, the batch goes on
        raw = getattr(env, "unwrapped", env)
        spec = getattr(raw, "reward_spec", None)
        zeros = spec.zeros() if spec is not None else {}
        turn = getattr(raw, "turn", 0)
        return env_bug_step(exc, turn=(turn if isinstance(turn, int) else 0) + 1, state_key="", signals=zeros)
