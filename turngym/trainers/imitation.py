"""Imitation warm start: behaviour cloning of (optionally noisy) oracle demonstrations.

RL from a random tiny model would spend its whole budget discovering the action grammar. A
short supervised phase on the env's oracle — with a fraction of its turns replaced by random
actions from the grammar, so the clone is competent but imperfect — gives RL a policy whose
successes and failures are both common: exactly where group-relative advantages carry signal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from turngym.agents.base import Action, AgentInput
from turngym.core.errors import ConfigError

__all__ = ["NoisyOracle", "describe", "sft_batches"]


class NoisyOracle:
    """The env's oracle, except that with probability ``noise`` a turn is a random action.

    Privileged like every scripted agent (it reads the env); the oracle recovers from the
    random turns because it continues from the current state.
    """

    name = "noisy-oracle"

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= noise <= 1.0:
            raise ConfigError(f"noise is a probability, got {noise}")
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        out = []
        for inp in batch:
            env = getattr(inp.env, "unwrapped", inp.env)
            if env is None:
                raise ConfigError("NoisyOracle reads the env: pass AgentInput(env=...) (the rollout engine does)")
            noisy = self.noise > 0 and self.rng.random() < self.noise
            out.append(Action(env.sample_action(self.rng) if noisy else env.oracle_action(), meta={"noisy": noisy}))
        return out


def sft_batches(n_samples: int, batch_size: int, steps: int, rng_for_step: Callable[[int], np.random.Generator]) -> list[np.ndarray]:
    """Sample indices for each imitation step (deterministic per step index)."""
    if n_samples == 0:
        raise ConfigError("no demonstrations to imitate")
    size = min(batch_size, n_samples)
    return [rng_for_step(s).choice(n_samples, size=size, replace=False) for s in range(steps)]


def describe(samples: Sequence[Any]) -> dict[str, float]:
    """Mean sequence length and supervised tokens of rendered demonstrations."""
    return {
        "demo_tokens": float(np.mean([len(s.input_ids) for s in samples])),
        "demo_action_tokens": float(np.mean([sum(s.loss_mask) for s in samples])),
    }
