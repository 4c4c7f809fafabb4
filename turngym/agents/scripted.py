"""Scripted, privileged agents: the env family's oracle, and a random agent on its grammar."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from turngym.agents.base import Action, AgentInput
from turngym.core.errors import ConfigError

__all__ = ["OracleAgent", "RandomAgent"]


def _env_of(inp: AgentInput):  # noqa: ANN202
    if inp.env is None:
        raise ConfigError("scripted agents read the env: pass AgentInput(env=...) (the rollout engine does)")
    return getattr(inp.env, "unwrapped", inp.env)


class OracleAgent:
    """Plays ``env.oracle_action()``: the family's scripted solver (a reference, and demos)."""

    name = "oracle"
    privileged = True

    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        return [Action(_env_of(inp).oracle_action()) for inp in batch]


class RandomAgent:
    """Plays ``env.sample_action(rng)``: random actions from the family's action grammar.

    Seeded, and it owns its RNG, so two runs with the same seed play the same actions.
    """

    name = "random"
    privileged = True

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        return [Action(_env_of(inp).sample_action(self.rng)) for inp in batch]
