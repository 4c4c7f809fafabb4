"""Turn-level advantage estimators: pure, vectorized functions over a turn table.

>>> from turngym.trainers.advantages import compute_advantages, ESTIMATORS
>>> turns = {"episode": [0, 0, 1], "group": [0, 0, 0], "turn": [0, 1, 0],
...          "reward": [0.0, 1.0, 0.0], "state_key": ["s0", "s1", "s0"]}
>>> compute_advantages("gigpo", turns, gamma=0.95, omega=1.0).round(3).tolist()
[1.414, 0.707, -1.414]
>>> sorted(ESTIMATORS)[:3]
['gae', 'gae_grouped', 'gigpo']

Every estimator takes a :class:`TurnTable` (or the mapping of columns it is built from) and
keyword parameters, and returns one float64 advantage per input row, in input order. Use them
from any trainer (TRL, verl, your own): build the table from your rollouts, call
:func:`compute_advantages`, put each row's advantage on that turn's action tokens.
:mod:`turngym.trainers.advantages.reference` holds the same estimators as plain Python loops
(the readable spec the tests check the vectorized code against).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
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
from turngym.trainers.advantages.table import TurnTable, TurnTableError, as_turn_table
from turngym.trainers.advantages.tree import tree
from turngym.trainers.advantages.turn_grpo import turn_grpo

__all__ = ["ESTIMATORS", "Estimator", "TurnTable", "TurnTableError", "as_turn_table", "compute_advantages", "register_estimator"]

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


def register_estimator(name: str, fn: Estimator) -> None:
    """Add an estimator ``fn(turns, **params) -> np.ndarray`` under ``name``."""
    if not name.isidentifier():
        raise ConfigError(f"estimator name must be an identifier, got {name!r}")
    ESTIMATORS[name] = fn


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
    return fn(as_turn_table(turns), **params)
