"""Signals → per-turn rewards: weighted events, potential-based shaping, a bounded-shaping guard.

An env's :class:`~turngym.core.spec.RewardSpec` declares each process signal with a suggested
``weight`` and whether it is an *event* of the turn (a new intermediate value was found) or a
*potential* of the state (the fraction of the solution reached). :class:`RewardShaper` turns a
turn's signals into reward the way each kind needs:

* events add ``w · signal`` on the turn they fire;
* potentials add ``w · (γ Φ(s') − Φ(s))`` (Ng, Harada & Russell, 1999, "Policy invariance under
  reward transformations"): the sum over an episode telescopes to ``γ^T Φ(s_T) − Φ(s_0)``, so
  going back and forth earns nothing, and with ``Φ(terminal) = 0`` the optimal policy is
  unchanged;
* a guard bounds the *cumulative* shaping of an episode to ``[floor, cap]`` at every prefix
  ("Clipping", from the reward-refinement study in docs/methods seed 000 #92), so repeating a
  rewarded action cannot farm reward beyond the cap.

The outcome reward (the env's own per-turn ``reward``) passes through untouched; shaping is
added on top and reported separately, so a trainer can log how much of the return it is.

>>> from turngym.core.spec import RewardSpec, Signal
>>> spec = RewardSpec(signals=(Signal("hit", 0, 1, "verifiable", "a gold value", weight=0.1),
...                            Signal("progress", 0, 1, "verifiable", "fraction done", potential=True, weight=0.5)),
...                   outcome="1 if solved")
>>> shaper = RewardShaper(spec, gamma=1.0, cap=0.15)
>>> signals = [{"hit": 1, "progress": 0.5}, {"hit": 1, "progress": 0.5}, {"hit": 0, "progress": 1.0}]
>>> shaper.turn_rewards([0.0, 0.0, 1.0], signals, terminated=True).round(3).tolist()
[0.15, 0.0, 1.0]

(Raw shaping: 0.1 + 0.25, 0.1 + 0, 0 − 0.25. The potential returns to 0 at the terminal state,
and the repeated ``hit`` earns nothing once the cumulative shaping reaches the 0.15 cap.)
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.core.spec import RewardSpec

__all__ = ["RewardShaper", "ShapedRewards", "bound_cumulative", "delta_rewards", "potential_shaping"]


def potential_shaping(potentials: Sequence[float], *, gamma: float = 1.0, initial: float = 0.0, terminal: bool = True) -> np.ndarray:
    """``F_t = γ Φ(s_{t+1}) − Φ(s_t)`` for an episode, one value per turn.

    Args:
        potentials: ``Φ`` of the state *after* each turn (what the env reports on that turn).
        gamma: the discount of the return the shaping is added to (use the estimator's γ
            for exact policy invariance).
        initial: ``Φ(s_0)``, the potential before the first turn (envs report none at reset).
        terminal: the episode *terminated*, so ``Φ`` of its final state counts as 0 (required
            for invariance when episode lengths differ). Pass False for a truncated episode.

    >>> potential_shaping([0.5, 0.5, 1.0], terminal=False).tolist()
    [0.5, 0.0, 0.5]
    >>> potential_shaping([0.5, 0.5, 1.0], terminal=True).tolist()   # Σ = Φ(s_T)=0 − Φ(s_0)
    [0.5, 0.0, -0.5]
    """
    phi = np.concatenate([[initial], np.asarray(potentials, dtype=np.float64)])
    if terminal and phi.size > 1:
        phi[-1] = 0.0
    return gamma * phi[1:] - phi[:-1]


def bound_cumulative(shaping: Sequence[float], *, cap: float = math.inf, floor: float = -math.inf) -> np.ndarray:
    """Rewrite per-turn shaping so its running sum stays in ``[floor, cap]`` at every turn.

    ``C_t = clip(Σ_{k≤t} s_k, floor, cap)`` and the bounded reward is ``C_t − C_{t−1}``: turns
    are paid exactly until the cap is reached, nothing after it (until a penalty brings the
    running total back under the cap). An episode's total shaping is always within bounds,
    however often a rewarded action is repeated.

    >>> bound_cumulative([0.1] * 5, cap=0.25).round(3).tolist()
    [0.1, 0.1, 0.05, 0.0, 0.0]
    """
    if not floor <= 0.0 <= cap:
        raise ConfigError(f"need floor <= 0 <= cap, got floor={floor}, cap={cap}")
    running = np.clip(np.cumsum(np.asarray(shaping, dtype=np.float64)), floor, cap)
    return np.diff(running, prepend=0.0)


def delta_rewards(process: Sequence[float]) -> np.ndarray:
    """"Delta" refinement: ``r'_t = r_t − r_{t+1}`` (last turn keeps ``r_T``).

    The episode total telescopes to the first turn's process reward, so adding more rewarded
    steps never raises it (docs/methods seed 000 #92).

    >>> delta_rewards([0.3, 0.3, 0.3]).tolist()
    [0.0, 0.0, 0.3]
    """
    r = np.asarray(process, dtype=np.float64)
    return r - np.append(r[1:], 0.0)


@dataclass(frozen=True)
class ShapedRewards:
    """Per-turn rewards of one episode, with the parts that make them up."""

    outcome: np.ndarray
    """The env's own per-turn reward (passes through unchanged)."""
    events: np.ndarray
    """Σ w · signal over event signals, per turn (before the guard)."""
    potential: np.ndarray
    """Σ w · (γΦ(s') − Φ(s)) over potential signals, per turn (before the guard)."""
    shaping: np.ndarray
    """events + potential after the bounded-shaping guard."""

    @property
    def total(self) -> np.ndarray:
        return self.outcome + self.shaping


class RewardShaper:
    """Turn an env's signals into per-turn rewards with its :class:`RewardSpec`'s weights.

    Args:
        spec: the env's reward spec (``env.reward_spec``).
        gamma: discount for potential-based shaping (match the estimator's γ).
        weights: per-signal weights overriding the spec's suggestions (``{"progress": 0.5}``);
            a name the spec does not declare is an error.
        cap: bound on an episode's cumulative shaping (``math.inf`` = unbounded).
        floor: lower bound on it (``-math.inf`` = unbounded).
    """

    def __init__(
        self,
        spec: RewardSpec,
        *,
        gamma: float = 1.0,
        weights: Mapping[str, float] | None = None,
        cap: float = math.inf,
        floor: float = -math.inf,
    ) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
        if not floor <= 0.0 <= cap:
            raise ConfigError(f"need floor <= 0 <= cap, got floor={floor}, cap={cap}")
        weights = dict(weights or {})
        for name in weights:
            if name not in spec:
                close = difflib.get_close_matches(name, spec.names, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"weight for undeclared signal {name!r}.{hint} The env declares: {', '.join(spec.names)}")
        self.spec, self.gamma, self.cap, self.floor = spec, gamma, cap, floor
        w = {s.name: weights.get(s.name, s.weight) for s in spec}
        self.event_weights = {s.name: w[s.name] for s in spec if not s.potential and w[s.name] != 0.0}
        self.potential_weights = {s.name: w[s.name] for s in spec if s.potential and w[s.name] != 0.0}

    @property
    def active(self) -> bool:
        """Whether any signal has a non-zero weight (otherwise rewards pass through)."""
        return bool(self.event_weights or self.potential_weights)

    def shape(self, rewards: Sequence[float], signals: Sequence[Mapping[str, float]], *, terminated: bool = True) -> ShapedRewards:
        """Shape one episode: env rewards and each turn's ``info["signals"]``."""
        if len(rewards) != len(signals):
            raise ConfigError(f"{len(rewards)} rewards for {len(signals)} turns of signals")
        outcome = np.asarray(rewards, dtype=np.float64)
        events = np.array([sum(w * float(sig.get(k, 0.0)) for k, w in self.event_weights.items()) for sig in signals])
        potential = np.zeros(len(signals))
        for name, w in self.potential_weights.items():
            phi, last = [], 0.0
            for sig in signals:  # a turn that omits a potential keeps the last known value
                last = float(sig.get(name, last))
                phi.append(last)
            potential += w * potential_shaping(phi, gamma=self.gamma, terminal=terminated)
        events = events.reshape(len(signals))
        shaping = bound_cumulative(events + potential, cap=self.cap, floor=self.floor)
        return ShapedRewards(outcome=outcome, events=events, potential=potential, shaping=shaping)

    def turn_rewards(self, rewards: Sequence[float], signals: Sequence[Mapping[str, float]], *, terminated: bool = True) -> np.ndarray:
        """The shaped per-turn rewards of one episode (outcome + bounded shaping)."""
        return self.shape(rewards, signals, terminated=terminated).total

    def shape_episode(self, episode: Any) -> ShapedRewards:
        """Shape a rollout :class:`~turngym.rollout.Episode` (its rewards and signals)."""
        turns = episode.turns
        terminated = bool(turns) and bool(turns[-1].terminated)
        return self.shape([t.reward for t in turns], [t.signals for t in turns], terminated=terminated)

    def episode_rewards(self, episode: Any) -> np.ndarray:
        """Shaped per-turn rewards of a rollout :class:`~turngym.rollout.Episode`."""
        return self.shape_episode(episode).total
