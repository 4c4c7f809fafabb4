"""Estimators declare their inputs; the trainer fills the ones the rollout table lacks through providers."""

from __future__ import annotations

import numpy as np
import pytest

import turngym
from turngym.agents import OracleAgent, RandomAgent
from turngym.core.errors import ConfigError
from turngym.rollout import run_episodes, to_turn_table
from turngym.trainers import TrainConfig
from turngym.trainers.advantages import ESTIMATORS, register_estimator
from turngym.trainers.advantages.table import _DECLARED
from turngym.trainers.providers import PROVIDERS, ProviderContext, fill_inputs, missing_inputs, register_provider


def _episodes():
    make = lambda: turngym.make("turngym/Math-v0", max_steps=2, max_turns=4)  # noqa: E731
    return run_episodes(make, OracleAgent(), [0, 1], group_size=2) + run_episodes(make, RandomAgent(seed=0), [0, 1])


@pytest.fixture
def custom_input():
    """A user estimator with an input of its own, registered beside its provider (removed after)."""
    register_estimator("by_turns", lambda turns: turns.column("turns_left") * 0 + turns.reward, requires=("turns_left",))
    seen: list[ProviderContext] = []

    def turns_left(ctx: ProviderContext) -> list[float]:
        seen.append(ctx)
        return [float(len(ep.turns) - t.index - 1) for ep in ctx.episodes for t in ep.turns]

    register_provider("turns_left", turns_left)
    yield seen
    ESTIMATORS.pop("by_turns")
    PROVIDERS.pop("turns_left")
    _DECLARED.discard("turns_left")


def test_a_new_input_is_filled_by_its_provider_with_no_trainer_change(custom_input) -> None:
    eps = _episodes()
    table = to_turn_table(eps)
    trainer = object()  # what the provider may read; this one needs none of it
    fill_inputs("by_turns", eps, table, trainer)
    assert table["turns_left"].tolist() == [float(len(e.turns) - t.index - 1) for e in eps for t in e.turns]
    (ctx,) = custom_input
    assert ctx.trainer is trainer and ctx.episodes is eps
    assert missing_inputs("by_turns") == [] and TrainConfig(algo="by_turns").algo == "by_turns"


def test_columns_of_the_rollout_table_need_no_provider() -> None:
    eps = _episodes()
    table = to_turn_table(eps)
    before = set(table)
    fill_inputs("gigpo", eps, table, None)  # state_before is in the rollout table already
    fill_inputs("tree", eps, table, None)
    assert set(table) == before
    with pytest.raises(ConfigError, match="rollout table itself"):
        register_provider("state_before", lambda ctx: [])


def test_a_provider_returning_the_wrong_number_of_values_is_named(custom_input) -> None:
    PROVIDERS["turns_left"] = lambda ctx: [0.0]
    eps = _episodes()
    with pytest.raises(ConfigError, match="'turns_left' provider returned 1 values"):
        fill_inputs("by_turns", eps, to_turn_table(eps), None)


def test_gae_reads_the_learned_critic_and_is_refused_without_a_value_provider() -> None:
    from types import SimpleNamespace

    assert missing_inputs("gae") == []  # built in: the trainer's learned critic (turngym.trainers.critic)
    assert TrainConfig(algo="gae").critic_kind == "shared"
    with pytest.raises(ConfigError, match="critic='shared'"):  # a trainer without a critic: the fix is named
        fill_inputs("gae", _episodes(), to_turn_table(_episodes()), SimpleNamespace(critic=None))
    saved = PROVIDERS.pop("value")
    try:  # the generic refusal of an input nobody fills
        assert missing_inputs("gae") == ["value"]
        with pytest.raises(ConfigError, match="'value'.*register_provider"):
            TrainConfig(algo="gae")
        with pytest.raises(ConfigError, match="'value', which no provider fills"):
            fill_inputs("gae", [], {"episode": np.zeros(0)}, None)
    finally:
        PROVIDERS["value"] = saved


def test_the_process_provider_reads_the_trainers_process_shaper() -> None:
    from types import SimpleNamespace

    from turngym.rewards import RewardShaper

    eps = _episodes()
    spec = turngym.make("turngym/Math-v0").reward_spec
    trainer = SimpleNamespace(process_shaper=RewardShaper(spec, gamma=1.0, weights={}, cap=0.5))
    table = to_turn_table(eps)
    fill_inputs("papo", eps, table, trainer)
    want = [float(x) for ep in eps for x in trainer.process_shaper.shape_episode(ep).shaping]
    assert table["process"].tolist() == want and any(want)


def test_the_gold_answer_travels_with_the_episode() -> None:
    eps = _episodes()
    env = turngym.make("turngym/Math-v0", max_steps=2).unwrapped
    for ep in eps:
        env.reset(seed=ep.seed)
        assert ep.meta["gold"] == str(env.task.gold)
