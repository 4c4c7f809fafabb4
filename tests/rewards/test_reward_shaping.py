"""Signals → rewards: weights from the spec, potential shaping, the bounded-shaping guard."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turngym
from turngym.agents import OracleAgent, RandomAgent
from turngym.core.errors import ConfigError
from turngym.core.spec import RewardSpec, Signal
from turngym.rewards import RewardShaper, bound_cumulative, delta_rewards, potential_shaping
from turngym.rollout import run_episodes

SPEC = RewardSpec(
    signals=(
        Signal("tool_ok", 0, 1, "verifiable", "tool ran", weight=0.05),
        Signal("repeat", 0, 1, "verifiable", "same call again", weight=-0.1),
        Signal("progress", 0, 1, "verifiable", "fraction done", potential=True, weight=1.0),
        Signal("silent", 0, 1, "verifiable", "report only"),
    ),
    outcome="1 if solved",
)


def test_event_weights_come_from_the_spec_and_can_be_overridden() -> None:
    signals = [{"tool_ok": 1, "repeat": 0, "progress": 0, "silent": 1}, {"tool_ok": 1, "repeat": 1, "progress": 0, "silent": 1}]
    shaped = RewardShaper(SPEC).shape([0.0, 1.0], signals, terminated=True)
    np.testing.assert_allclose(shaped.events, [0.05, -0.05])
    np.testing.assert_allclose(shaped.total, [0.05, 0.95])
    override = RewardShaper(SPEC, weights={"silent": 2.0, "tool_ok": 0.0}).shape([0.0, 1.0], signals)
    np.testing.assert_allclose(override.events, [2.0, 1.9])


def test_unknown_weight_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'progress'"):
        RewardShaper(SPEC, weights={"progres": 1.0})
    with pytest.raises(ConfigError, match="cap"):
        RewardShaper(SPEC, cap=-1.0)


def test_potential_shaping_telescopes() -> None:
    phi = [0.2, 0.5, 0.5, 0.9]
    f = potential_shaping(phi, gamma=0.9, initial=0.1, terminal=False)
    np.testing.assert_allclose(f, [0.9 * 0.2 - 0.1, 0.9 * 0.5 - 0.2, 0.9 * 0.5 - 0.5, 0.9 * 0.9 - 0.5])
    # γ = 1: the sum is Φ(s_T) − Φ(s_0); terminal: Φ(s_T) = 0.
    assert potential_shaping(phi, terminal=False).sum() == pytest.approx(0.9)
    assert potential_shaping(phi, terminal=True).sum() == pytest.approx(0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=20), st.floats(0.5, 1.0))
def test_potential_shaping_cannot_be_farmed_by_oscillating(phi: list[float], gamma: float) -> None:
    """Going back and forth between states earns nothing: the discounted sum only depends on ends."""
    f = potential_shaping(phi, gamma=gamma, terminal=False)
    discounted = sum(gamma**t * x for t, x in enumerate(f))
    assert discounted == pytest.approx(gamma ** len(phi) * phi[-1] - 0.0, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=1, max_size=30), st.floats(0, 2), st.floats(-2, 0))
def test_bounded_guard_keeps_every_prefix_in_bounds(shaping: list[float], cap: float, floor: float) -> None:
    bounded = bound_cumulative(shaping, cap=cap, floor=floor)
    running = np.cumsum(bounded)
    assert np.all(running <= cap + 1e-9) and np.all(running >= floor - 1e-9)
    raw = np.cumsum(shaping)
    inside = (raw <= cap) & (raw >= floor)
    # While the raw running total never left the bounds, nothing changes.
    first_out = np.argmin(inside) if not inside.all() else len(shaping)
    np.testing.assert_allclose(bounded[:first_out], np.asarray(shaping)[:first_out], atol=1e-12)


def test_repeating_a_rewarded_action_cannot_farm_reward() -> None:
    shaper = RewardShaper(SPEC, weights={"repeat": 0.0}, cap=0.2)
    farm = [{"tool_ok": 1.0, "progress": 0.0}] * 100
    total_shaping = shaper.shape([0.0] * 100, farm, terminated=False).shaping.sum()
    assert total_shaping == pytest.approx(0.2)
    unbounded = RewardShaper(SPEC, weights={"repeat": 0.0}).shape([0.0] * 100, farm, terminated=False).shaping.sum()
    assert unbounded == pytest.approx(5.0)  # what the guard prevents


def test_delta_refinement_total_is_the_first_reward() -> None:
    r = [0.3, 0.5, 0.1, 0.7]
    assert delta_rewards(r).sum() == pytest.approx(0.3)
    assert delta_rewards([0.2] * 50).sum() == pytest.approx(0.2)


def test_missing_potential_carries_the_last_value() -> None:
    shaped = RewardShaper(SPEC).shape([0, 0, 0], [{"progress": 0.5}, {}, {"progress": 1.0}], terminated=False)
    np.testing.assert_allclose(shaped.potential, [0.5, 0.0, 0.5])


def test_math_env_episodes_oracle_earns_more_shaping_than_random() -> None:
    env_id = "turngym/Math-v0"
    spec = turngym.make(env_id).reward_spec
    shaper = RewardShaper(spec, weights={"progress": 0.5}, cap=0.5)
    oracle = run_episodes(lambda: turngym.make(env_id, max_steps=3), OracleAgent(), range(8))
    rand = run_episodes(lambda: turngym.make(env_id, max_steps=3), RandomAgent(seed=1), range(8))
    for ep in oracle + rand:
        shaped = shaper.episode_rewards(ep)
        assert len(shaped) == len(ep.turns)
        np.testing.assert_allclose(shaped - [t.reward for t in ep.turns], shaper.shape([t.reward for t in ep.turns], [t.signals for t in ep.turns], terminated=ep.turns[-1].terminated).shaping)
        assert shaped.sum() - ep.total_reward <= 0.5 + 1e-9
    mean_oracle = np.mean([shaper.episode_rewards(ep).sum() for ep in oracle])
    mean_random = np.mean([shaper.episode_rewards(ep).sum() for ep in rand])
    assert mean_oracle > mean_random
    assert math.isfinite(mean_oracle)
