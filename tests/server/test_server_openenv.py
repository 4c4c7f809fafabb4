"""OpenEnv's own client (PyPI ``openenv-core``) drives a turngym env through whole episodes."""

from __future__ import annotations

import asyncio
import json

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


# ------------------------------------------------------------------ several envs, tokens, tools (issue 39)
mcp_client = pytest.importorskip("openenv.core.mcp_client", reason="openenv-core not installed")
mcp_types = pytest.importorskip("openenv.core.env_server.mcp_types", reason="openenv-core not installed")
TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def multi_server():
    with ServerThread(["turngym/Math-v0", "turngym/Tools-v0"], max_sessions=8, token=TOKEN) as srv:
        yield srv


def test_openenv_client_picks_an_env_on_a_multi_env_server_with_a_token(multi_server):
    """OpenEnv's client takes a URL and nothing else: the token rides as the URL's user info (Basic
    auth), and ``reset(env_id=...)`` moves the connection to another served env."""
    local = turngym.make("turngym/Tools-v0")
    obs, info = local.reset(seed=3)
    url = multi_server.http_url.replace("http://", f"http://turngym:{TOKEN}@")
    with GenericEnvClient(base_url=url).sync() as client:
        assert client.reset(seed=0).observation["task_id"].startswith("math/")  # the server's first env
        result = client.reset(env_id="turngym/Tools-v0", seed=3)
        assert result.observation["text"] == obs and result.observation["state_key"] == info["state_key"]
        action = local.oracle_action()
        o, r, *_ = local.step(action)
        step = client.step({"text": action})
        assert step.observation["text"] == o and step.reward == r and step.observation["action_valid"]
        assert client.state()["env_id"] == "turngym/Tools-v0"
        with pytest.raises(RuntimeError, match="not served here"):
            client.reset(env_id="turngym/Shop-v0")
        assert client.reset(env_id="turngym/Math-v0", seed=1).observation["task_id"].startswith("math/")


def test_a_wrong_or_missing_token_is_refused(multi_server):
    for url in (multi_server.http_url, multi_server.http_url.replace("http://", "http://turngym:wrong@")):
        with pytest.raises(Exception):  # noqa: B017 - the refused handshake (403) is the client's connection error
            with GenericEnvClient(base_url=url).sync() as client:
                client.reset(seed=0)


@pytest.mark.parametrize("env_id", ["turngym/Tools-v0", "turngym/MCP-SQLite-v0"])
def test_openenv_mcp_tool_client_lists_and_calls_the_envs_tools(env_id):
    """OpenEnv's ``MCPToolClient`` plays the oracle's episode: ``list_tools`` shows the env's tools
    (the real MCP server's for MCP-SQLite), each call is a turn with the local env's observation and
    reward, and a reply to the user is an ordinary step."""
    if "MCP" in env_id:
        pytest.importorskip("mcp", reason="the mcp extra: pip install 'turngym[mcp]'")
    local = turngym.make(env_id)
    local.reset(seed=0)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in local.tools}

    async def play(url: str) -> tuple[list, list]:
        turns = []
        async with mcp_client.MCPToolClient(base_url=url) as client:
            await client.reset(seed=0)
            tools = await client.list_tools()
            while not local.done:
                action = local.oracle_action()
                call = json.loads(action) if action.lstrip().startswith(("[", "{")) else None
                call = call[0] if isinstance(call, list) and len(call) == 1 else call
                expected = local.step(action)
                if isinstance(call, dict) and "name" in call:
                    res = await client.step(mcp_types.CallToolAction(tool_name=call["name"], arguments=call["arguments"]))
                    turns.append((res.observation.result, res.reward, res.done, res.observation.error))
                else:  # a reply to the user: an ordinary step
                    res = await client.step(action)
                    turns.append((None, res.reward, res.done, None))
                assert (turns[-1][0] in (None, expected[0])) and turns[-1][1:3] == (expected[1], expected[2] or expected[3])
            return tools, turns

    with ServerThread([env_id], max_sessions=4) as srv:
        tools, turns = asyncio.run(play(srv.http_url))
    local.close()
    assert {t.name: t.input_schema for t in tools} == schemas
    assert any(result is not None for result, *_ in turns)  # at least one tool call went through call_tool
    assert all(error is None for *_, error in turns) and turns[-1][2]  # played to the end, no transport error
