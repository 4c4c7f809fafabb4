"""The outcome on truncation, whoever truncates.

A turngym env ends every episode with ``info["outcome"]`` (the terminal reward comes from it).
When the env's own turn budget (``max_turns``, or ``max_episode_steps`` given to
:func:`turngym.make`) ends an episode, the env writes it. But gymnasium truncates from the
outside: ``gymnasium.make(id, max_episode_steps=N)`` wraps the env in a ``TimeLimit`` that sets
``truncated`` without the env knowing, so the final reward never arrived (issue 38).
:class:`OutcomeOnTruncation` is registered as every turngym id's additional wrapper, so
gymnasium puts it outside its ``TimeLimit`` (and ``make_vec`` around each sub-env): on a
truncation the env did not finalize itself, it asks the env to end the episode as its own
budget would (:meth:`~turngym.core.env.TurngymEnv.truncate`) and adds the outcome and its reward.
A ``TimeLimit`` applied by hand must be wrapped the same way: ``OutcomeOnTruncation(TimeLimit(env, N))``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["OutcomeOnTruncation", "WRAPPER_SPEC"]


class OutcomeOnTruncation(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adds the env's truncation outcome (and its reward) when a wrapper inside truncated the episode."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if truncated and not terminated and "outcome" not in info:
            base = self.env.unwrapped
            if not getattr(base, "done", True):  # the env did not end it itself
                outcome = base.truncate()
                info = {**info, "outcome": outcome}
                reward = float(reward) + float(outcome.get("reward", 0.0))
        return obs, float(reward), terminated, truncated, info


WRAPPER_SPEC = gym.envs.registration.WrapperSpec("OutcomeOnTruncation", f"{__name__}:OutcomeOnTruncation", {})
"""How :func:`turngym.core.registry.register` names the wrapper to gymnasium (``additional_wrappers``)."""
