"""Providers: how the trainer fills the turn-table columns an estimator declares.

An estimator declares the columns it reads (``register_estimator(name, fn,
requires=("process",))``, :func:`turngym.trainers.advantages.estimator_inputs`). The trainer
builds each step's turn table from the episodes (:func:`turngym.rollout.to_turn_table`, which
already holds ``state_before``, ``node``, ``parent`` and ``correct``) and fills every other
declared column from the provider registered under that column's name. Adding an estimator
with a new input is therefore two registrations side by side, and no change to the trainer::

    register_estimator("my_algo", my_algo, requires=("difficulty",))
    register_provider("difficulty", lambda ctx: [...one float per row of ctx.table...])

Provider signature: ``provider(ctx: ProviderContext) -> Sequence[float]``, one value per row
of ``ctx.table`` in its row order (episode by episode, turns in order). ``ctx.trainer`` is
the running trainer's :class:`~turngym.trainers.learner.Learner`, so a provider can use its
state: the policy (``trainer.model``, ``trainer.tokenizer``), the shapers
(``trainer.shaper``, ``trainer.process_shaper``), the config, or the learned critic it holds.

Built in: ``process`` (PAPO: each turn's bounded shaping under ``process_weights``),
``info_gain`` (IGPO: the policy's gain in belief in the gold answer, which the rollout
records in ``Episode.meta["gold"]``) and ``value`` (GAE: the trainer's learned turn-level
critic, :func:`turngym.trainers.critic.value_provider`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError

__all__ = ["PROVIDERS", "ROLLOUT_COLUMNS", "Provider", "ProviderContext", "fill_inputs", "missing_inputs", "register_provider"]

#: Columns every table from :func:`turngym.rollout.to_turn_table` already holds.
ROLLOUT_COLUMNS = ("state_before", "state_after", "node", "parent", "correct")


@dataclass(frozen=True)
class ProviderContext:
    """What a provider sees: the step's scored episodes, their turn table and the trainer."""

    episodes: Sequence[Any]
    """The episodes of the table, in its order (infra failures already dropped)."""
    table: Mapping[str, np.ndarray]
    """The :func:`~turngym.rollout.to_turn_table` columns built so far."""
    trainer: Any
    """The running trainer's :class:`~turngym.trainers.learner.Learner` (policy, tokenizer, shapers,
    config, critic): the weights the update is about to change."""


Provider = Callable[[ProviderContext], Sequence[float]]

PROVIDERS: dict[str, Provider] = {}


def register_provider(column: str, fn: Provider) -> None:
    """Fill ``column`` with ``fn(ctx)`` whenever the trained estimator declares it."""
    if column in ROLLOUT_COLUMNS or column in ("episode", "group", "turn", "reward"):
        raise ConfigError(f"{column!r} comes from the rollout table itself; a provider cannot replace it")
    PROVIDERS[column] = fn


def missing_inputs(algo: str) -> list[str]:
    """Declared inputs of ``algo`` that neither the rollout table nor a provider supplies."""
    from turngym.trainers.advantages import estimator_inputs

    return [c for c in estimator_inputs(algo) if c not in ROLLOUT_COLUMNS and c not in PROVIDERS]


def fill_inputs(algo: str, episodes: Sequence[Any], table: dict[str, np.ndarray], trainer: Any) -> None:
    """Add to ``table`` every column ``algo`` declares that the rollout table lacks."""
    from turngym.trainers.advantages import estimator_inputs

    n = len(table["episode"])
    for column in estimator_inputs(algo):
        if column in table:
            continue
        fn = PROVIDERS.get(column)
        if fn is None:
            raise ConfigError(f"estimator {algo!r} needs the column {column!r}, which no provider fills: "
                              f"register one with turngym.trainers.providers.register_provider({column!r}, fn)")
        values = np.asarray(fn(ProviderContext(episodes, table, trainer)), dtype=np.float64)
        if values.shape != (n,):
            raise ConfigError(f"the {column!r} provider returned {values.shape[0] if values.ndim == 1 else values.shape} "
                              f"values for {n} turns; it must return one per row of the table")
        table[column] = values


def _process(ctx: ProviderContext) -> list[float]:
    """A turn's process score: its bounded shaping under the process weights (PAPO)."""
    shaper = ctx.trainer.process_shaper
    return [float(x) for ep in ctx.episodes for x in shaper.shape_episode(ep).shaping]


def _info_gain(ctx: ProviderContext) -> list[float]:
    """Per-turn gain of the policy's belief in the gold answer (IGPO)."""
    from turngym.rewards import InfoGainScorer

    lacking = [ep.episode_id for ep in ctx.episodes if "gold" not in ep.meta]
    if lacking:
        raise ConfigError(f"info_gain needs each episode's gold answer (Episode.meta['gold'], recorded by local rollouts "
                          f"from env.unwrapped.task.gold); {len(lacking)} episodes lack it, e.g. {lacking[0]!r}")
    trainer = ctx.trainer
    trainer.model.eval()
    scorer = InfoGainScorer(trainer.model, trainer.tokenizer, batch_size=64)
    gains = scorer.episode_gains(ctx.episodes, [str(ep.meta["gold"]) for ep in ctx.episodes])
    return [float(g) for gs in gains for g in gs]


def _value(ctx: ProviderContext) -> Sequence[float]:
    """The learned critic's value of each turn's state (GAE)."""
    from turngym.trainers.critic import value_provider  # torch-backed: imported when a step asks

    return value_provider(ctx)


register_provider("process", _process)
register_provider("info_gain", _info_gain)
register_provider("value", _value)
