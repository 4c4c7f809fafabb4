"""Scripted, privileged agents: the env family's oracle, and a random agent on its grammar."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
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

    Seeded, with one generator per episode (seeded by the agent's seed and the episode id), so an
    episode's actions depend on nothing but the seed and the episode: not on the batch size, the
    order in which the runner schedules episodes, or an episode elsewhere ending early (a dead Ray
    node) — a fresh agent with the same seed plays the same episodes on every stepper. An agent
    reused for a second run goes on drawing where each episode's generator stopped (make a new one
    to replay). Inputs without an episode id share one generator.
    """

    name = "random"
    privileged = True
    max_open: int = 65_536
    """Per-episode generators kept (the oldest is dropped past it; far above any batch's episodes)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._episodes: OrderedDict[str, np.random.Generator] = OrderedDict()

    def _rng(self, episode_id: str) -> np.random.Generator:
        if not episode_id:
            return self.rng
        rng = self._episodes.get(episode_id)
        if rng is None:
            digest = hashlib.sha256(episode_id.encode("utf-8", "surrogatepass")).digest()
            rng = self._episodes[episode_id] = np.random.default_rng([self.seed, *np.frombuffer(digest[:16], np.uint32)])
            if len(self._episodes) > self.max_open:
                self._episodes.popitem(last=False)
        return rng

    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        return [Action(_env_of(inp).sample_action(self._rng(inp.episode_id))) for inp in batch]
