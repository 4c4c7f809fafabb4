"""Ray rollouts give the same episodes as the local lockstep runner (local Ray instance)."""

from __future__ import annotations

import json

import pytest

import turngym
from turngym.agents import OracleAgent, RandomAgent
from turngym.rollout import run_episodes

ray = pytest.importorskip("ray", reason="ray not installed (pip install 'turngym[ray]')")

from turngym.rollout.ray_runner import run_episodes_ray  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _dicts(episodes):
    return [json.loads(json.dumps(ep.to_dict())) for ep in episodes]


@pytest.mark.parametrize("agent", ["oracle", "random"])
def test_ray_rollout_equals_local_rollout(local_ray, agent):
    env_id = "turngym/Math-v0"
    seeds = list(range(30))

    def policy():
        return OracleAgent() if agent == "oracle" else RandomAgent(seed=3)

    local = run_episodes(lambda: turngym.make(env_id), policy(), seeds, batch_size=8, env_id=env_id)
    finished = []
    remote = run_episodes_ray(env_id, policy(), seeds, num_workers=2, batch_size=8, on_episode=finished.append)
    assert _dicts(remote) == _dicts(local)
    assert len(finished) == len(seeds)
    if agent == "oracle":
        assert all(ep.success for ep in remote)


def test_ray_rollout_passes_env_kwargs_and_tasks(local_ray):
    env_id = "turngym/Math-v0"
    env = turngym.make(env_id)
    task_ids = [env.reset(seed=s)[1]["task_id"] for s in (5, 6, 7)]
    eps = run_episodes_ray(env_id, RandomAgent(seed=0), [0, 1, 2], tasks=task_ids, env_kwargs={"max_turns": 2},
                           num_workers=3)
    assert [ep.task_id for ep in eps] == task_ids
    assert all(len(ep.turns) <= 2 for ep in eps)
