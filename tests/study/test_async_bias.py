"""Bias of gigpo, turn_grpo, tree and gae when one batch mixes policy versions (asynchronous training).

The study (:mod:`turngym.study.async_bias`) compares the expected gradient from a batch whose
first turn was sampled by an older version (partial rollouts) with the on-policy one, in a chain
where the agent decides when to stop (episode length depends on the policy, verl RFC #7244) and
in the fixed-length control. ``raw_z``/``z``: the largest bias component in standard errors
(before / after the best scale). These are the claims ``docs/async.md`` makes.
"""

from __future__ import annotations

import pytest

from turngym.study.async_bias import ASYNC_ESTIMATORS, AsyncBiasConfig, run_async_bias_study


@pytest.fixture(scope="module")
def stops() -> dict:
    return run_async_bias_study(AsyncBiasConfig(batches=40, groups=32))


@pytest.fixture(scope="module")
def fixed() -> dict:
    """The control (every episode lasts the horizon), for gae: what per-token IS is enough for."""
    return run_async_bias_study(AsyncBiasConfig(batches=40, groups=32, length_depends_on_policy=False), estimators=("gae",),
                                modes=("ignore", "tis", "prefix_is"))


def test_ignoring_versions_biases_every_estimator(stops: dict, fixed: dict) -> None:
    for name in ASYNC_ESTIMATORS:
        assert stops[name]["ignore"]["raw_z"] > 8, (name, stops[name]["ignore"])
    assert fixed["gae"]["ignore"]["raw_z"] > 8


def test_gae_with_a_current_critic_is_exact_under_prefix_is_even_when_length_depends_on_the_policy(stops: dict, fixed: dict) -> None:
    for result in (stops, fixed):
        assert result["gae"]["prefix_is"]["raw_z"] < 4, result["gae"]["prefix_is"]
    assert fixed["gae"]["tis"]["raw_z"] < 4  # fixed length: the state a turn acts in does not depend on earlier actions
    # ...but when it does, per-token IS leaves the older version's odds of reaching the state in the gradient
    assert stops["gae"]["tis"]["raw_z"] > 8, stops["gae"]["tis"]


def test_turn_grpo_is_exact_under_prefix_is_when_length_depends_on_the_policy(stops: dict) -> None:
    assert stops["turn_grpo"]["prefix_is"]["raw_z"] < 4, stops["turn_grpo"]["prefix_is"]


def test_prefix_is_removes_most_of_the_group_estimators_bias_but_not_all(stops: dict) -> None:
    for name in ("gigpo", "tree"):
        ignore, prefix, tis = (stops[name][m]["raw_bias"] for m in ("ignore", "prefix_is", "tis"))
        assert prefix < 0.4 * ignore and prefix < 0.6 * tis, (name, ignore, tis, prefix)
        # what remains is the group statistics': a step group's size and std follow the mixed batch's visits
        assert stops[name]["prefix_is"]["z"] > 3, stops[name]["prefix_is"]


def test_grouping_by_version_signature_is_the_trap(stops: dict) -> None:
    """Comparing only episodes played by the same versions compares short episodes (over before
    the swap) with short ones: the baseline then depends on the action, and the bias triples."""
    for name in ("gigpo", "tree"):
        assert stops[name]["tis_episode_groups"]["raw_bias"] > 2 * stops[name]["tis"]["raw_bias"], name
    # splitting step groups by the turn's own version changes nothing in a lockstep rollout
    assert stops["gigpo"]["tis_turn_groups"] == stops["gigpo"]["tis"]


_MEAN_CENTRED = {"gigpo": {"normalize": "mean", "gamma": 1.0}, "turn_grpo": {"scale": False}, "tree": {"scale": False}}


@pytest.fixture(scope="module")
def centred() -> tuple[dict, dict]:
    """The group estimators without their std division, both shapes of episode."""
    return tuple(run_async_bias_study(AsyncBiasConfig(batches=40, groups=32, length_depends_on_policy=dep, params=_MEAN_CENTRED),
                                      estimators=tuple(_MEAN_CENTRED), modes=("tis", "prefix_is")) for dep in (True, False))


def test_without_the_std_division_prefix_is_makes_the_group_estimators_exact(centred: tuple[dict, dict]) -> None:
    stops, fixed = centred
    for name in ("turn_grpo", "tree"):
        for result in (stops, fixed):
            assert result[name]["prefix_is"]["raw_z"] < 4, (name, result[name]["prefix_is"])
    assert fixed["gigpo"]["prefix_is"]["raw_z"] < 4, fixed["gigpo"]["prefix_is"]
    # gigpo's step groups keep a small residual when length depends on the policy: a step group's
    # size (each row's own share of its baseline) follows how many episodes reached that state
    assert stops["gigpo"]["prefix_is"]["raw_bias"] < 0.05, stops["gigpo"]["prefix_is"]
    assert stops["tree"]["tis"]["raw_z"] > 8  # per-token IS alone is not enough there
