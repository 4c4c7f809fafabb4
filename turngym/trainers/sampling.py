"""Batches that carry signal: dynamic sampling and a pool of tasks at the edge of the policy's ability.

A group-relative update learns nothing from a group whose members all earn the same return, and
a nearly deterministic small model produces mostly such groups (``docs/study/smollm2-rl-cpu``:
``zero_adv_frac`` 1.0 on many steps). Two remedies from the literature, both bounded so a step's
cost stays predictable:

- **Dynamic sampling** (DAPO): drop the groups whose returns are all equal and play further rounds
  of fresh tasks, at most ``dynamic_rounds`` of them, until ``groups_per_step`` informative groups
  are in hand (:func:`dynamic_batch`). If the bound is reached first, the batch is filled up with
  uninformative groups of the first round so every step trains on the same number of episodes.
- **Edge-of-ability task pool** (:class:`EdgePool`): every ``edge_refresh`` steps, play
  ``edge_k`` rollouts of the current policy on each of ``edge_pool`` candidate tasks and keep the
  tasks solved 1..k−1 times; the RL steps draw their tasks from those. Success variance, which
  bounds the gain of a policy-gradient step, is largest there (arXiv 2504.03380).

Both draw their randomness from ``(seed, phase, step, round)`` like every other draw of a run, and
the pool is part of the checkpoint, so a resumed run plays exactly what an uninterrupted one would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from turngym.trainers.signal import group_episodes, is_informative

__all__ = ["EdgePool", "dynamic_batch", "edge_tasks"]


def dynamic_batch(first: Sequence[Any], more: Callable[[int], Sequence[Any]], *, groups: int, rounds: int) -> tuple[list[Any], dict[str, Any]]:
    """Up to ``groups`` informative groups: those of ``first``, then of ``more(1)``, ``more(2)``, …
    (at most ``rounds`` extra rounds, stopping as soon as there are enough).

    Returns the batch (groups in the order they were played, each whole) and the row fields
    ``sample_rounds`` (extra rounds played), ``sampled_groups`` (all groups played) and
    ``sampled_uniform_frac`` (their share with all returns equal). A batch short of informative
    groups after the last round is filled up with uninformative groups of the first round.
    """
    played = group_episodes(first)
    informative = [g for g in played if is_informative(g)]
    extra = 0
    while len(informative) < groups and extra < rounds:
        extra += 1
        new = group_episodes(more(extra))
        played += new
        informative += [g for g in new if is_informative(g)]
    chosen = informative[:groups]
    if len(chosen) < groups:
        chosen += [g for g in group_episodes(first) if not is_informative(g)][: groups - len(chosen)]
    uniform = sum(not is_informative(g) for g in played)
    row = {"sample_rounds": extra, "sampled_groups": len(played), "sampled_uniform_frac": round(uniform / max(len(played), 1), 4)}
    return [ep for g in chosen for ep in g], row


def edge_tasks(episodes: Sequence[Any]) -> tuple[list[int], dict[str, float]]:
    """The task seeds of the groups solved by some but not all of their members, and the scoring's
    row fields (``pool_candidates``, ``pool_kept``, ``pool_solve_rate``, ``pool_unsolved_frac``)."""
    groups = [g for g in group_episodes(episodes) if g and g[0].seed is not None]
    solved = [sum(bool(ep.success) for ep in g) for g in groups]
    kept = [int(g[0].seed) for g, s in zip(groups, solved) if 0 < s < len(g)]
    n = max(len(groups), 1)
    rate = float(sum(solved) / max(sum(len(g) for g in groups), 1))
    return kept, {"pool_candidates": len(groups), "pool_kept": len(kept), "pool_solve_rate": round(rate, 4),
                  "pool_unsolved_frac": round(sum(s == 0 for s in solved) / n, 4)}


class EdgePool:
    """The run's tasks at the edge of ability (see the module docstring).

    Args:
        candidates: ``candidates(step)`` → the candidate task seeds scored at refresh step ``step``.
        score: ``score(seeds, step)`` → ``edge_k`` episodes per seed played by the current policy.
        refresh: steps between two scorings.
    """

    FILE = "edge_pool.json"
    """Its state inside a checkpoint directory."""

    def __init__(self, candidates: Callable[[int], list[int]], score: Callable[[list[int], int], Sequence[Any]], *, refresh: int) -> None:
        self.candidates = candidates
        self.score = score
        self.refresh = refresh
        self.scored_at: int | None = None
        self.kept: list[int] = []
        self.fallback: list[int] = []
        """The candidates of the last scoring: drawn from when none was at the edge."""

    def update(self, step: int) -> dict[str, Any]:
        """Score a fresh set of candidates if ``step`` is a refresh step not scored yet; returns the
        scoring's row fields (empty when the pool was current)."""
        due = step - step % self.refresh
        if self.scored_at == due:
            return {}
        self.fallback = self.candidates(due)
        self.kept, row = edge_tasks(self.score(self.fallback, due))
        self.scored_at = due
        return row

    def draw(self, rng: np.random.Generator, n: int) -> list[int]:
        """``n`` task seeds from the pool (with replacement only when it holds fewer than ``n``)."""
        pool = self.kept or self.fallback
        return [int(s) for s in rng.choice(pool, size=n, replace=n > len(pool))]

    def save(self, directory: Path) -> None:
        (directory / self.FILE).write_text(json.dumps({"scored_at": self.scored_at, "kept": self.kept, "fallback": self.fallback}))

    def load(self, directory: Path) -> bool:
        """Restore the pool saved in a checkpoint directory; False when it holds none (the pool is then rescored)."""
        file = directory / self.FILE
        if not file.exists():
            return False
        state = json.loads(file.read_text())
        self.scored_at, self.kept, self.fallback = state["scored_at"], list(state["kept"]), list(state["fallback"])
        return True
