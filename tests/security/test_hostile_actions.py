"""Every registered env against hostile actions (:mod:`turngym.core.hostile`): each step returns a
transition, within a time bound, whatever the action.

Hypothesis picks an attack (deep nesting of every bracket kind, 10⁵-long binary and unary operator
chains, huge integer and float literals, NULs and lone surrogates, megabyte actions, malformed tool
JSON), its size, a seed and a delivery: the payload wrapped in the env's own grammar (its tags,
tools and commands, the oracle's action around it; SWE-v0's task file rewritten and edited again),
so it reaches the parsers and verifiers behind the grammar. The CI part runs the cases that once
escaped (``@example``) and a few drawn ones per env; ``-m slow`` runs many more.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import turngym
from turngym.core.checker import step_problems
from turngym.core.hostile import ATTACKS, deliveries, payload

ENV_IDS = sorted(turngym.list_envs())
SANDBOX_ENVS = {"turngym/Code-v0", "turngym/SWE-v0"}  # steps that run code: fewer CI examples, a wider bound
STEP_BOUND_S = {"fast": 10.0, "sandbox": 60.0}  # generous: the CI machine is shared and loaded

attacks = st.sampled_from(sorted(ATTACKS))
sizes = st.sampled_from([1, 64, 3_000, 20_000, 100_000])
hows = st.integers(0, 63)
seeds = st.integers(0, 3)

_envs: dict[str, object] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_envs():
    yield
    for env in _envs.values():
        env.close()
    _envs.clear()


def drive(env_id: str, attack: str, n: int, how: int, seed: int) -> None:
    """Reset ``env_id``, send the payload in delivery ``how``; every step must be a transition in time."""
    env = _envs.get(env_id) or _envs.setdefault(env_id, turngym.make(env_id))
    env.reset(seed=seed)
    ways = deliveries(env, turngym.env_info(env_id).family)
    bound = STEP_BOUND_S["sandbox" if env_id in SANDBOX_ENVS else "fast"]
    for action in ways[how % len(ways)](payload(attack, n)):
        t0 = time.perf_counter()
        result = env.step(action)  # an exception here is the escape this test exists for
        seconds = time.perf_counter() - t0
        assert isinstance(result, tuple) and len(result) == 5, result
        info = result[4]
        assert isinstance(info.get("action_valid"), bool), info
        assert step_problems(env, result) == [], (attack, n, how)
        assert seconds < bound, f"{env_id}: {attack} (n={n}, delivery {how}) took {seconds:.1f} s"
        if result[2] or result[3]:
            break


# The escapes found by the attack round of issue 28: a 40 KB binary chain (RecursionError in
# compile()), a long unary chain (MemoryError), via <run>, a ``` block with <submit/>, and SWE-v0's
# task file rewritten then edited (ast.parse in function_span); delivery 0 is each family's main one.
ESCAPES = [("chain +", 20_000, 0, 0), ("unary -", 100_000, 0, 0), ("unary -", 100_000, 2, 0), ("lone surrogates", 64, 0, 0)]


def _with_escapes(test):
    for case in ESCAPES:
        test = example(*case)(test)
    return test


@pytest.mark.parametrize("env_id", [e for e in ENV_IDS if e not in SANDBOX_ENVS])
@settings(max_examples=4, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(attack=attacks, n=sizes, how=hows, seed=seeds)
@_with_escapes
def test_hostile_actions_are_transitions(env_id, attack, n, how, seed):
    drive(env_id, attack, n, how, seed)


@pytest.mark.parametrize("env_id", sorted(SANDBOX_ENVS))
@settings(max_examples=1, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(attack=attacks, n=sizes, how=hows, seed=seeds)
@_with_escapes
def test_hostile_actions_are_transitions_in_sandbox_envs(env_id, attack, n, how, seed):
    drive(env_id, attack, n, how, seed)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(attack=attacks, n=sizes, how=hows, seed=seeds)
def test_hostile_actions_are_transitions_deep(env_id, attack, n, how, seed):
    drive(env_id, attack, n, how, seed)
