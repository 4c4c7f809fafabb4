"""The outcome arrives on truncation whoever truncates (issue 38): gymnasium's TimeLimit, a step
limit given to ``turngym.make``, a TimeLimit applied by hand, and each sub-env of a vector env."""

from __future__ import annotations

import gymnasium
import pytest

import turngym
from turngym.core.errors import ConfigError
from turngym.core.truncation import OutcomeOnTruncation

ENV = "turngym/Household-v0"  # its truncation outcome carries fields (goal_condition_rate, task_type) besides the reward
ACTIONS = ("look", "inventory", "look")


def _play(env, steps: int) -> tuple[list[float], dict]:
    env.reset(seed=3)
    rewards = []
    for action in ACTIONS[:steps]:
        _, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        if terminated or truncated:
            assert truncated and not terminated
            return rewards, info
    raise AssertionError("the episode was not truncated")


def _budget_ends_it() -> tuple[list[float], dict]:
    """The reference: the env's own turn budget ends the episode after 2 steps."""
    return _play(turngym.make(ENV, max_turns=2), 2)


def test_gymnasium_make_max_episode_steps_brings_the_outcome_and_its_reward() -> None:
    rewards, info = _play(gymnasium.make(ENV, max_episode_steps=2), 3)
    ref_rewards, ref_info = _budget_ends_it()
    assert info["outcome"] == ref_info["outcome"] and info["outcome"]["reason"] == "max_turns"
    assert rewards == ref_rewards


def test_turngym_make_accepts_max_episode_steps() -> None:
    env = turngym.make(ENV, max_episode_steps=2)
    assert env.max_turns == turngym.make(ENV).max_turns  # the agent's budget (its prompt) is unchanged
    assert env.spec.max_episode_steps == 2
    rewards, info = _play(env, 3)
    assert info["outcome"] == _budget_ends_it()[1]["outcome"] and env.done
    with pytest.raises(ConfigError, match="max_episode_steps"):
        turngym.make(ENV, max_episode_steps=0)


def test_a_time_limit_applied_by_hand_is_finalized_by_the_wrapper() -> None:
    env = OutcomeOnTruncation(gymnasium.wrappers.TimeLimit(turngym.make(ENV), max_episode_steps=2))
    _, info = _play(env, 3)
    assert info["outcome"] == _budget_ends_it()[1]["outcome"]
    with pytest.raises(turngym.core.errors.ResetNeeded):  # ended: the env says so, as after its own budget
        env.unwrapped.step("look")


def test_a_vector_env_brings_each_sub_envs_outcome() -> None:
    """``gymnasium.make_vec`` works: each sub-env is a gymnasium.make env (wrapper included)."""
    envs = gymnasium.make_vec(ENV, num_envs=2, vectorization_mode="sync", max_episode_steps=2)
    try:
        envs.reset(seed=3)
        envs.step(("look", "look"))
        _, rewards, terminated, truncated, infos = envs.step(("inventory", "inventory"))
        assert truncated.tolist() == [True, True] and terminated.tolist() == [False, False]
        assert infos["_outcome"].tolist() == [True, True]
        assert infos["outcome"]["reason"].tolist() == ["max_turns", "max_turns"]
        assert "goal_condition_rate" in infos["outcome"]
    finally:
        envs.close()
