"""Code-v0 on the container backend: HumanEval's canonical solutions pass, broken ones fail,
and episodes give the same rewards as on bubblewrap for the same seeds and actions."""

from __future__ import annotations

import pytest

import turngym
from tests.docker.conftest import ROOT, load_path, play_traces
from turngym.envs.code.runner import evaluate_many
from turngym.envs.code.tasks import load_humaneval
from turngym.sandbox import Limits

_code_cases = load_path("turngym_code_env_cases", ROOT / "tests/envs/test_code_env.py")
BREAK, _problem = _code_cases.BREAK, _code_cases._problem


def _humaneval_verdicts(sandbox, tasks):
    good = evaluate_many(sandbox, [_problem(t) for t in tasks])
    broken = evaluate_many(sandbox, [_problem(t, t.gold + BREAK.format(name=t.entry_point)) for t in tasks])
    return good, broken


def test_humaneval_sample_canonical_pass_and_broken_fail(docker_sb):
    tasks = load_humaneval()[::8]  # 21 problems spread over the set
    assert len(tasks) >= 20
    good, broken = _humaneval_verdicts(docker_sb, tasks)
    assert [t.id for t, e in zip(tasks, good) if not e.all_passed] == []
    assert [t.id for t, e in zip(tasks, broken) if e.all_passed] == []


@pytest.mark.slow
def test_humaneval_all_164_canonical_pass_and_broken_fail(docker_sb):
    tasks = load_humaneval()
    good, broken = _humaneval_verdicts(docker_sb, tasks)
    assert len(tasks) == 164
    assert [t.id for t, e in zip(tasks, good) if not e.all_passed] == []
    assert [t.id for t, e in zip(tasks, broken) if e.all_passed] == []


def _episodes(sandbox, seeds, sampled=3, oracle=3):
    """Random actions, then the oracle's until the episode ends: the whole trace per seed."""
    env = turngym.make("turngym/Code-v0", sandbox=sandbox, warm=False)
    try:
        return play_traces(env, seeds, sampled, oracle)
    finally:
        env.close()


def test_code_episodes_match_bubblewrap_on_the_same_seeds(docker_sb, bwrap_sb):
    seeds = [0, 3, 11]
    on_docker = _episodes(docker_sb, seeds)
    assert on_docker == _episodes(bwrap_sb, seeds)
    assert all(ep[-1][2] or ep[-1][3] for ep in on_docker)  # every episode ran to its end
    assert any(ep[-1][1] == 1.0 for ep in on_docker)  # and some ended with the oracle's fix rewarded


def test_agent_code_that_kills_its_grader_fails_its_tests_not_the_infra(docker_sb):
    env = turngym.make("turngym/Code-v0", sandbox=docker_sb, warm=False, limits=Limits(wall_s=3, cpu_s=3))
    try:
        env.reset(seed=0)
        bomb = "```python\nimport os, signal\nos.kill(-1, signal.SIGKILL)\n```"
        _, reward, _, _, info = env.step(bomb)
        assert not info.get("infra_error") and info["signals"]
        env.step(env.oracle_action())  # the fix, then the submission
        _, reward, term, _, info = env.step(env.oracle_action())
        assert term and info["outcome"]["success"] and not info.get("infra_error")
    finally:
        env.close()


_one_uid = load_path("turngym_one_uid_cases", ROOT / "tests/security/test_one_uid_grader.py")


def test_a_solution_that_stops_its_grader_is_held_to_the_runs_wall_budget(docker_sb):
    """Docker runs grader and solution as one uid (65534) with no PID namespace of the grader's
    own: a solution's SIGSTOP of its grader stalls the step -- to the run's wall budget, the
    documented bound (docs/sandbox.md), after which the run is killed and the unreached tests
    fail as the agent's failure, never an infra_error; the next submission is judged normally."""
    import time

    from turngym.envs.code.tasks import CodeTask

    task = CodeTask(id="stop", prompt="", gold="def f(x):\n    return x\n", entry_point="f",
                    tests=tuple((f"t{i}", f"candidate({i})", str(i)) for i in range(10)))
    env = turngym.make("turngym/Code-v0", sandbox=docker_sb, tasks=[task], per_test_s=0.5, warm=False)
    budget = max(docker_sb.limits.wall_s, 2 + 0.5 * (len(task.tests) + 2))
    try:
        env.reset(options={"task": "stop"})
        t = time.monotonic()
        obs, _, _, _, info = env.step(f"```python\n{_one_uid.STOP_EVERYTHING}```")
        took = time.monotonic() - t
        print(f"docker: a SIGSTOP of the grader held the step {took:.1f} s (wall budget {budget:g} s + 3 s grace)")
        assert info["infra_error"] is None and info["signals"]["pass_rate"] == 0.0, obs
        assert took < budget + 3.0 + 5.0, took
        obs, reward, _, _, info = env.step(f"<submit>\n```python\n{task.gold}```")
        assert reward == 1.0 and info["infra_error"] is None, obs
    finally:
        env.close()
