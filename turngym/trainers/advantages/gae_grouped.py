"""GAGPO: Generalized Advantage Grouped Policy Optimization (critic-free GAE over a grouped,
non-parametric value proxy; arXiv 2605.13217, digest in docs/methods, seed 001 A73).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.trainers.advantages._segments import (
    EPS,
    check_unit,
    combine_codes,
    discounted_returns,
    normalize_in_segments,
    reverse_discounted_sum,
    segment_stats,
)
from turngym.trainers.advantages.table import TurnTable, as_turn_table

__all__ = ["gae_grouped", "grouped_value_proxy", "next_in_episode"]


def next_in_episode(values: np.ndarray, table: TurnTable) -> np.ndarray:
    """Each row's value at the next turn of its episode (0 after the final turn)."""
    order = table.order
    nxt = np.zeros(table.n_rows)
    sorted_vals = values[order]
    not_last = ~table.is_last[order]
    shifted = np.zeros(table.n_rows)
    shifted[:-1] = sorted_vals[1:]
    nxt[order] = np.where(not_last, shifted, 0.0)
    return nxt


def grouped_value_proxy(table: TurnTable, returns: np.ndarray, learned: np.ndarray | None = None) -> np.ndarray:
    """V(row) = mean return-to-go of the rows of its group acting in the same state.

    Rows whose state is shared by no other row of the group (or tables without
    ``state_before``) fall back to the mean over the rows of the group at the same turn index,
    or, given ``learned`` (a critic's value per row), to the critic's value of their state.
    """
    if learned is not None:
        value = np.asarray(learned, np.float64)
    else:
        by_turn = combine_codes(table.group, table.turn)
        value = segment_stats(returns, by_turn).mean[by_turn]
    if table.state_before is not None:
        by_state = combine_codes(table.group, table.state_before)
        st = segment_stats(returns, by_state)
        value = np.where(st.count[by_state] >= 2, st.mean[by_state], value)
    return value


def gae_grouped(
    turns: TurnTable | Mapping[str, Any],
    *,
    gamma: float = 0.95,
    lam: float = 0.95,
    normalize: bool = True,
    eps: float = EPS,
    value_baseline: bool = False,
) -> np.ndarray:
    """GAGPO: GAE(γ, λ) over a value proxy estimated from the group, then group normalization.

    1. ``G_t = r_t + γ G_{t+1}``; ``V(s_t)`` = mean ``G`` of the group's rows acting in the
       same state (``state_before``), falling back to the same turn index (see
       :func:`grouped_value_proxy`).
    2. ``δ_t = r_t + γ V(s_{t+1}) − V(s_t)`` with ``V = 0`` after the final turn.
    3. ``A_t = Σ_k (γλ)^k δ_{t+k}`` (the textbook GAE recursion, per episode).
    4. If ``normalize``: z-score ``A`` over the rows of the group.

    ``value_baseline=True`` keeps the group's statistics where it has them (a state two rows of
    the group acted in) and takes a learned critic's value (the ``value`` column) where it has
    none, instead of the turn-index mean: on long horizons most states are visited once, and the
    turn index says little about them.

    With λ = 1 and ``normalize=False`` this is the Monte-Carlo return minus the grouped
    baseline, ``G_t − V(s_t)``; with λ = 0 it is the one-step TD error.

    Example: two one-state episodes from state ``s``: a 2-turn success and a 1-turn failure
    (no normalization, γ = λ = 1, so A = G − V with V(s) = mean(1, 1, 0)):

    >>> turns = {"episode": [0, 0, 1], "group": [0, 0, 0], "turn": [0, 1, 0],
    ...          "reward": [0.0, 1.0, 0.0], "state_before": ["s", "s", "s"]}
    >>> gae_grouped(turns, gamma=1.0, lam=1.0, normalize=False).round(4).tolist()
    [0.3333, 0.3333, -0.6667]
    """
    check_unit("gamma", gamma)
    check_unit("lam", lam)
    table = as_turn_table(turns)
    returns = discounted_returns(table, gamma)
    if value_baseline:
        table.require("gae_grouped (value_baseline=True)", "value")
    value = grouped_value_proxy(table, returns, table.value if value_baseline else None)
    deltas = table.reward + gamma * next_in_episode(value, table) - value
    adv = reverse_discounted_sum(deltas, table, gamma * lam)
    return normalize_in_segments(adv, table.group, eps=eps) if normalize else adv
