"""The runner against steppers that lie about :meth:`~turngym.rollout.steppers.Stepper.alive`.

A retired slot never starts again and a job goes back to the queue at most once per retired slot,
so however ``alive`` answers, every job ends (played, or unscored with the reason) and the rollout
returns: no answer can loop it."""

from __future__ import annotations

import itertools

import pytest

import turngym
from turngym.agents import OracleAgent
from turngym.core.errors import InfraError
from turngym.rollout import run_episodes
from turngym.rollout.steppers import LocalStepper


class LyingStepper(LocalStepper):
    """Test double: the math envs in this process, where the resets of ``broken`` slots always fail and
    ``alive`` answers from ``answers`` (cycled), whatever the slot's state."""

    def __init__(self, broken: set[int], answers: list[bool]) -> None:
        super().__init__(lambda: turngym.make("turngym/Math-v0"))
        self.broken = broken
        self.answers = itertools.cycle(answers)
        self.resets = 0

    def reset(self, slot, seed, options):
        self.resets += 1
        assert self.resets < 1000, "the runner keeps resetting"
        if slot in self.broken:
            raise InfraError(f"slot {slot}'s env server is gone")
        return super().reset(slot, seed, options)

    def alive(self, slot: int) -> bool:
        return next(self.answers)


@pytest.mark.parametrize("broken", [{0}, {0, 1, 2}])
@pytest.mark.parametrize("answers", [[True], [False], [True, False], [False, False, True]])
def test_every_job_ends_however_alive_answers(broken, answers):
    stepper = LyingStepper(broken, answers)
    episodes = run_episodes(stepper, OracleAgent(), range(6), batch_size=3, group_size=2, env_id="turngym/Math-v0")
    assert len(episodes) == 12
    played = [e for e in episodes if not e.meta.get("infra_error")]
    if len(broken) == 3:
        assert not played  # no slot can play: every job is unscored with the reason
        assert all("env server is gone" in e.meta["infra_error"] or "no live env slot" in e.meta["infra_error"]
                   for e in episodes)
    else:
        assert played and all(e.outcome.get("success") for e in played)
