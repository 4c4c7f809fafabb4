"""OpenEnv's own client (PyPI ``openenv-core``) drives a turngym env through whole episodes."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("uvicorn", reason="needs the server extra: pip install 'turngym[server]'")
pytest.importorskip("starlette", reason="needs the server extra: pip install 'turngym[server]'")

import turngym
from turngym.server.testing import ServerThread

openenv = pytest.importorskip("openenv.core.generic_client", reason="openenv-core not installed")
GenericEnvClient = openenv.GenericEnvClient


@pytest.fixture(scope="module")
def server():
    with ServerThread(["turngym/Math-v0"], max_sessions=16) as srv:
        yield srv


@pytest.mark.parametrize("path", ["", "/openenv/turngym/Math-v0"])
def test_openenv_client_plays_whole_episodes(server, path):
    local = turngym.make("turngym/Math-v0")
    with GenericEnvClient(base_url=server.http_url + path).sync() as client:
        for seed in (0, 1, 2):
            obs, info = local.reset(seed=seed)
            result = client.reset(seed=seed, episode_id=f"ep-{seed}")
            assert result.observation["text"] == obs and result.done is False
            assert result.observation["state_key"] == info["state_key"]
            # a wrong answer first (a turn with signals), then the oracle to the end
            actions = ["<calc>2+2</calc>"]
            while True:
                action = actions.pop() if actions else local.oracle_action()
                o, r, term, trunc, i = local.step(action)
                result = client.step({"text": action})
                ob = result.observation
                assert ob["text"] == o and result.reward == r and result.done == (term or trunc)
                assert ob["terminated"] == term and ob["truncated"] == trunc
                assert ob["signals"] == i["signals"] and ob["state_key"] == i["state_key"]
                assert ob["action_valid"] == i["action_valid"] and ob["turn"] == i["turn"]
                if result.done:
                    break
            assert ob["outcome"]["success"] is True and ob["outcome"] == i["outcome"]
            state = client.state()
            assert state["episode_id"] == f"ep-{seed}" and state["step_count"] == i["turn"] and state["done"]


def test_openenv_errors_are_error_frames(server):
    with GenericEnvClient(base_url=server.http_url).sync() as client:
        with pytest.raises(RuntimeError, match="EXECUTION_ERROR"):
            client.step({"text": "<answer>1</answer>"})  # before reset: ResetNeeded on the server
        client.reset(seed=0)
        result = client.step({"text": "no tags at all"})  # malformed actions are part of the episode
        assert result.observation["action_valid"] is False and result.observation["invalid_reason"]


def test_openenv_schema_metadata_health(server):
    schema = httpx.get(f"{server.http_url}/schema", timeout=10).json()
    assert set(schema) == {"action", "observation", "state"}
    assert schema["action"]["required"] == ["text"] and "signals" in schema["observation"]["properties"]
    assert httpx.get(f"{server.http_url}/metadata", timeout=10).json()["name"] == "turngym/Math-v0"
    assert httpx.get(f"{server.http_url}/openenv/turngym/Math-v0/health", timeout=10).json()["status"] == "healthy"
