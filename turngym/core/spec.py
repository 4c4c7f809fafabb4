"""Declarations of what an env emits: process signals and the outcome.

An env's :class:`RewardSpec` is its promise to trainers and to :func:`turngym.check_env`:
every name in ``info["signals"]`` is declared here with its range, its kind and its meaning,
and nothing undeclared ever appears. Weights are the env author's suggested shaping
coefficients; ``turngym.rewards`` turns signals into per-turn rewards with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from turngym.core.errors import ConfigError

__all__ = ["Signal", "RewardSpec", "SignalKind"]

SignalKind = Literal["verifiable", "heuristic", "model"]
_KINDS = ("verifiable", "heuristic", "model")


@dataclass(frozen=True, slots=True)
class Signal:
    """One named per-turn process signal.

    Attributes:
        name: snake_case key under ``info["signals"]``.
        low: smallest value the env can emit.
        high: largest value the env can emit.
        kind: ``verifiable`` (checked against the task, e.g. a test passed), ``heuristic``
            (a rule of thumb, e.g. query overlap) or ``model`` (scored by a learned model).
        description: one line: when it fires and what it means.
        weight: suggested coefficient when shaping rewards from signals (0 = report only).
        potential: True if the signal is a state potential Φ(s) (use it via potential-based
            shaping, γΦ(s') − Φ(s)), False if it is an event of this turn.
    """

    name: str
    low: float
    high: float
    kind: SignalKind
    description: str
    weight: float = 0.0
    potential: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ConfigError(f"signal name must be a snake_case identifier, got {self.name!r}")
        if self.kind not in _KINDS:
            raise ConfigError(f"signal {self.name!r}: kind must be one of {_KINDS}, got {self.kind!r}")
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low <= self.high):
            raise ConfigError(
                f"signal {self.name!r}: need finite low <= high, got [{self.low}, {self.high}]"
            )

    def contains(self, value: float) -> bool:
        """True if ``value`` is a finite number inside ``[low, high]``."""
        return isinstance(value, (int, float)) and math.isfinite(value) and self.low <= value <= self.high


@dataclass(frozen=True)
class RewardSpec:
    """The outcome and the per-turn signals an env declares.

    Attributes:
        signals: every process signal, in a stable order.
        outcome: how the final reward is computed, in words (shown in docs and ``turngym envs``).
        outcome_range: (min, max) of the outcome reward.
        success_threshold: an episode whose outcome reward is >= this counts as a success.
    """

    signals: tuple[Signal, ...]
    outcome: str
    outcome_range: tuple[float, float] = (0.0, 1.0)
    success_threshold: float = 1.0
    _by_name: Mapping[str, Signal] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [s.name for s in self.signals]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"RewardSpec declares signal(s) twice: {dupes}")
        object.__setattr__(self, "_by_name", {s.name: s for s in self.signals})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.signals)

    def __getitem__(self, name: str) -> Signal:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Signal]:
        return iter(self.signals)

    def __len__(self) -> int:
        return len(self.signals)

    def zeros(self) -> dict[str, float]:
        """A fresh signals dict with every declared signal at 0 (clamped into its range)."""
        return {s.name: min(max(0.0, s.low), s.high) for s in self.signals}

    def violations(self, signals: Mapping[str, object]) -> list[str]:
        """Describe every way ``signals`` breaks this spec (empty list = conforms)."""
        problems: list[str] = []
        missing = [n for n in self._by_name if n not in signals]
        extra = [n for n in signals if n not in self._by_name]
        if missing:
            problems.append(f"signals missing: {missing}")
        if extra:
            problems.append(f"undeclared signals emitted: {extra}")
        for name, value in signals.items():
            sig = self._by_name.get(name)
            if sig is not None and not sig.contains(value):  # type: ignore[arg-type]
                problems.append(f"signal {name}={value!r} outside [{sig.low}, {sig.high}]")
        return problems
