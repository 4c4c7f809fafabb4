"""Turn-level advantage estimators: pure, vectorized functions over a turn table.

>>> from turngym.trainers.advantages import compute_advantages, ESTIMATORS
>>> turns = {"episode": [0, 0, 1], "group": [0, 0, 0], "turn": [0, 1, 0],
...          "reward": [0.0, 1.0, 0.0], "state_before": ["s0", "s1", "s0"]}
>>> compute_advantages("gigpo", turns, gamma=0.95, omega=1.0).round(3).tolist()
[1.414, 0.707, -1.414]
>>> sorted(ESTIMATORS)[:3]
['gae', 'gae_grouped', 'gigpo']

Every estimator takes a :class:`TurnTable` (or the mapping of columns it is built from) and
keyword parameters, and returns one float64 advantage per input row, in input order. Use them
from any trainer (TRL, verl, your own): build the table from your rollouts with
:func:`turngym.rollout.to_turn_table`, call :func:`compute_advantages`, put each row's
advantage on that turn's action tokens (the table's ``sample``/``token_start``/``token_end``
columns). Each estimator declares the columns it reads beyond the required ones
(:func:`estimator_inputs`): ``gigpo`` needs ``state_before``, ``papo`` ``process``, ``igpo``
``info_gain``, ``gae`` ``value``; the built-in trainer fills a declared column the rollout
table lacks through a provider (:mod:`turngym.trainers.providers`).
:mod:`turngym.trainers.advantages.reference` holds the same estimators as plain Python loops
(the readable spec the tests check the vectorized code against).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.trainers.advantages.gae import gae
from turngym.trainers.advantages.gae_grouped import gae_grouped
from turngym.trainers.advantages.gigpo import gigpo
from turngym.trainers.advantages.grpo import grpo
from turngym.trainers.advantages.igpo import igpo
from turngym.trainers.advantages.igpo_turn_group import igpo_turn_group
from turngym.trainers.advantages.papo import papo
from turngym.trainers.advantages.rebn import rebn
from turngym.trainers.advantages.rloo import rloo
from turngym.trainers.advantages.table import TurnTable, TurnTableError, as_turn_table, declare_column
from turngym.trainers.advantages.tree import tree
from turngym.trainers.advantages.turn_grpo import turn_grpo

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "TurnTable",
    "TurnTableError",
    "as_turn_table",
    "compute_advantages",
    "estimator_inputs",
    "register_estimator",
]

Estimator = Callable[..., np.ndarray]

ESTIMATORS: dict[str, Estimator] = {
    "grpo": grpo,
    "rloo": rloo,
    "rebn": rebn,
    "gigpo": gigpo,
    "turn_grpo": turn_grpo,
    "tree": tree,
    "igpo": igpo,
    "igpo_turn_group": igpo_turn_group,
    "gae_grouped": gae_grouped,
    "gae": gae,
    "papo": papo,
}


_INPUTS: dict[str, tuple[str, ...]] = {
    "gigpo": ("state_before",),
    "turn_grpo": ("node", "parent"),
    "tree": ("node", "parent"),
    "igpo": ("info_gain",),
    "igpo_turn_group": ("info_gain",),
    "gae": ("value",),
    "papo": ("process",),
}


def register_estimator(name: str, fn: Estimator, *, requires: Sequence[str] = ()) -> None:
    """Add an estimator ``fn(turns, **params) -> np.ndarray`` under ``name``.

    ``requires`` names the columns it reads beyond ``episode, group, turn, reward``: built-in
    ones (``state_before``, ``node``/``parent``, ``info_gain``, ``value``, ``process``,
    ``correct``) or a new float column, which turn tables then accept
    (:meth:`TurnTable.column`). :func:`compute_advantages` refuses a table that lacks one, and
    the built-in trainer fills it from the rollout table or a provider registered under the
    column's name (:func:`turngym.trainers.providers.register_provider`).
    """
    if not name.isidentifier():
        raise ConfigError(f"estimator name must be an identifier, got {name!r}")
    if isinstance(requires, str):
        raise ConfigError(f"requires is a sequence of column names, got the string {requires!r}: write ({requires!r},)")
    for column in requires:
        declare_column(column)
    ESTIMATORS[name] = fn
    _INPUTS[name] = tuple(requires)


def estimator_inputs(name: str) -> tuple[str, ...]:
    """The columns estimator ``name`` reads beyond ``episode, group, turn, reward``."""
    _estimator(name)
    return _INPUTS.get(name, ())


def _estimator(name: str) -> Estimator:
    fn = ESTIMATORS.get(name)
    if fn is None:
        close = difflib.get_close_matches(name, list(ESTIMATORS), n=2)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ConfigError(f"unknown advantage estimator {name!r}.{hint} Known: {', '.join(sorted(ESTIMATORS))}")
    return fn


def compute_advantages(name: str, turns: TurnTable | Mapping[str, Any], **params: Any) -> np.ndarray:
    """Run the estimator ``name`` on ``turns``; one advantage per row, aligned with the input.

    Unknown parameters are rejected with the estimator's accepted ones listed, so a typo
    (``omgea=0.5``) cannot silently fall back to a default.
    """
    fn = _estimator(name)
    accepted = [p for p in inspect.signature(fn).parameters if p != "turns"]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ConfigError(f"estimator {name!r} got unknown parameter(s) {unknown}; it accepts {accepted or 'none'}")
    table = as_turn_table(turns)
    table.require(name, *_INPUTS.get(name, ()))
    return fn(table, **params)
