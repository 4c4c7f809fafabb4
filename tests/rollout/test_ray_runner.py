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


class _KillerOracle:
    """Test double: the oracle, except that at turn ``at`` it kills the actor behind the first env."""

    name = "killer-oracle"

    def __init__(self, at: int) -> None:
        self.oracle = OracleAgent()
        self.turns = 0
        self.at = at

    def act(self, batch):
        self.turns += 1
        if self.turns == self.at:
            ray.kill(batch[0].env.worker, no_restart=True)
        return self.oracle.act(batch)


def test_a_dead_env_worker_is_an_infra_error_and_the_rollout_goes_on(local_ray):
    env_id = "turngym/Math-v0"
    seeds = list(range(24))
    eps = run_episodes_ray(env_id, _KillerOracle(at=3), seeds, num_workers=2, batch_size=4)
    assert [ep.seed for ep in eps] == seeds
    lost = [ep for ep in eps if ep.infra_error]
    kept = [ep for ep in eps if not ep.infra_error]
    assert lost and kept
    assert all(ep.success for ep in kept)  # the live worker's episodes are scored as usual
    assert any(ep.turns and ep.turns[-1].infra_error for ep in lost)  # in flight when it died
    local = {ep.seed: ep for ep in run_episodes(lambda: turngym.make(env_id), OracleAgent(), seeds, env_id=env_id)}
    assert _dicts(kept) == _dicts([local[ep.seed] for ep in kept])
