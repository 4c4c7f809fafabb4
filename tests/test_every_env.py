"""Every registered env, parametrized over the registry: the contract and the oracle."""

import importlib

import numpy as np
import pytest

import turngym
from turngym.agents import OracleAgent, RandomAgent
from turngym.core.registry import load_entry_point
from turngym.rollout import run_episodes

ENV_IDS = sorted(turngym.list_envs())
#: Ids registered with a budget of their own rather than their family's default.
OWN_BUDGET = {"turngym/Tools-Store-v0": 20}


@pytest.mark.parametrize("env_id", [i for i in ENV_IDS if i.startswith("turngym/")])
def test_one_max_turns_default_per_family(env_id):
    info = turngym.env_info(env_id)
    family_default = importlib.import_module(f"turngym.envs.{info.family}").MAX_TURNS
    assert load_entry_point(info.entry_point).default_max_turns == family_default
    assert info.max_turns == OWN_BUDGET.get(env_id, family_default)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id):
    turngym.check_env(turngym.make(env_id), n_garbage=100)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_rollout(env_id):
    def play():
        return [
            (ep.initial_observation, [(t.action, t.observation, t.reward, t.signals, t.state_key) for t in ep.turns])
            for ep in run_episodes(lambda: turngym.make(env_id), RandomAgent(seed=5), [11, 12, 13], env_id=env_id)
        ]

    assert play() == play()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_oracle_full_reward_random_below(env_id):
    seeds = list(range(10))
    oracle = run_episodes(lambda: turngym.make(env_id), OracleAgent(), seeds, env_id=env_id)
    assert all(ep.success for ep in oracle), [ep.outcome for ep in oracle if not ep.success][:3]
    # the random agent gets at most 10 turns: enough to show it fails, cheap for slow envs
    short = min(turngym.env_info(env_id).max_turns, 10)
    random = run_episodes(lambda: turngym.make(env_id, max_turns=short), RandomAgent(seed=0), seeds, env_id=env_id)
    assert np.mean([ep.success for ep in random]) < 0.5
    spec = turngym.make(env_id).reward_spec
    for ep in random:
        for t in ep.turns:
            assert spec.violations(t.signals) == []
