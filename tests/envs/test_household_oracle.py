"""The household oracle: solves every task, optimally from the start; random play stays far below.

The full sweep (500 tasks per task type and split) is marked slow; the default run checks
a subset of every (split, task type) cell.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from turngym.envs.household import verifier
from turngym.envs.household import world as W
from turngym.envs.household.env import HouseholdEnv
from turngym.envs.household.tasks import SPLITS, TASK_TYPES, HouseholdTask, generate_task


def _play_oracle(env: HouseholdEnv, task: HouseholdTask) -> dict:
    env.reset(options={"task": task})
    info: dict = {}
    for _ in range(env.max_turns):
        *_, term, trunc, info = env.step(env.oracle_action())
        assert info["action_valid"], (task.id, info["invalid_reason"])
        if term or trunc:
            break
    return info


def _sweep(n: int, split: str, task_type: str) -> list[int]:
    env = HouseholdEnv()
    lengths = []
    for seed in range(n):
        task = generate_task(seed, task_type, split, 1 + seed % 3)
        info = _play_oracle(env, task)
        assert info["outcome"]["success"], (task.id, info["outcome"])
        lengths.append(info["turn"])
    return lengths


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_oracle_solves_every_task_subset(split: str, task_type: str) -> None:
    lengths = _sweep(40, split, task_type)
    assert max(lengths) <= 20


@pytest.mark.slow
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_oracle_solves_500_tasks(split: str, task_type: str) -> None:
    lengths = _sweep(500, split, task_type)
    print(f"{split} {task_type}: oracle 500/500, mean plan length {statistics.fmean(lengths):.2f}")


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_oracle_finishes_from_random_states(task_type: str) -> None:
    """The oracle replans: after a random prefix (things moved, lamps on, hands full) it still wins."""
    env = HouseholdEnv(task_types=(task_type,), max_turns=200)
    rng = np.random.default_rng(1)
    for seed in range(25):
        env.reset(seed=seed)
        done = False
        for _ in range(15):
            *_, term, trunc, _ = env.step(env.sample_action(rng))
            if term or trunc:
                done = True
                break
        if done:
            continue
        info: dict = {}
        for _ in range(40):
            *_, term, trunc, info = env.step(env.oracle_action())
            assert info["action_valid"], info["invalid_reason"]
            if term or trunc:
                break
        assert info["outcome"]["success"], (env.task.id, info["outcome"])


def shortest_plan_length(task: HouseholdTask, limit: int = 12) -> int | None:
    """Breadth-first search over world states (a test oracle for the oracle).

    Prunes what can never shorten a plan: read-only commands and ``close``.
    """
    w = W.compile_world(task)
    start = W.initial_state(w)
    full = verifier.full_mask(w.task_type)
    frontier, seen = [start], {start.world_key()}
    for depth in range(1, limit + 1):
        nxt = []
        for s in frontier:
            ops = [(W.GO, r) for r in range(len(w.rnames)) if r != s.loc]
            ops += [op for op in s.local.values() if op[0] not in W.READ_ONLY and op[0] != W.CLOSE]
            for op in ops:
                t = s.copy()
                W.apply(w, t, op)
                key = t.world_key()
                if key in seen:
                    continue
                seen.add(key)
                if verifier.conditions(w, t) == full:
                    return depth
                nxt.append(t)
        frontier = nxt
    return None


@pytest.mark.parametrize("task_type, n", [("pick_place", 8), ("look_in_light", 8), ("pick_clean_place", 2)])
def test_oracle_plans_are_shortest_subset(task_type: str, n: int) -> None:
    env = HouseholdEnv()
    for seed in range(n):
        task = generate_task(seed, task_type, "seen", 1)
        assert _play_oracle(env, task)["turn"] == shortest_plan_length(task), task.id


@pytest.mark.slow
@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_oracle_plans_are_shortest(task_type: str) -> None:
    env = HouseholdEnv()
    for seed in range(10):
        task = generate_task(seed, task_type, "unseen", 1)
        assert _play_oracle(env, task)["turn"] == shortest_plan_length(task), task.id


def test_random_admissible_agent_rarely_succeeds(record_property: pytest.RecordProperty) -> None:
    """Report the random agent's success per task type; it must stay far below the oracle."""
    env = HouseholdEnv()
    rng = np.random.default_rng(0)
    rates = {}
    for task_type in TASK_TYPES:
        wins = 0
        for seed in range(30):
            env.reset(options={"task": generate_task(seed, task_type, "seen", 1)})
            info: dict = {}
            for _ in range(env.max_turns):
                *_, term, trunc, info = env.step(env.sample_action(rng))
                assert info["action_valid"]
                for name, value in info["signals"].items():
                    assert env.reward_spec[name].contains(value)
                if term or trunc:
                    break
            wins += info["outcome"]["success"]
        rates[task_type] = wins / 30
    record_property("random_success", rates)
    print("random admissible-action success (difficulty 1, 30 tasks each):", rates)
    assert all(rate <= 0.3 for rate in rates.values()), rates
    assert statistics.fmean(rates.values()) < 0.15
