"""turngym/MCP-Memory-v0 against the real @modelcontextprotocol/server-memory (node, npm, bubblewrap).

The package is installed into the cache by the same function a user runs
(``python -m turngym.envs.mcp.memory_env --install``) when it is missing; without node/npm the
tests skip, except where ``TURNGYM_REQUIRE_NODE=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import json
import os

import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

import turngym
from tests.envs.memory_server_fixture import require_memory_server
from turngym.envs.mcp.memory_env import PACKAGE, VERSION
from turngym.envs.mcp.memory_tasks import _CITIES, generate_memory_task, graph_distance, read_graph

ENV_ID = "turngym/MCP-Memory-v0"


@pytest.fixture(scope="module")
def env():
    require_memory_server()
    e = turngym.make(ENV_ID)
    yield e
    e.close()


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def test_tasks_are_seeded_json_tasks_that_ask_for_something():
    tasks = [generate_memory_task(s) for s in range(300)]
    assert tasks[7] == generate_memory_task(7) and tasks[7].id == "mcp/memory/7"
    assert all(t.gold and (t.answers or t.goal != t.world) for t in tasks)
    assert all(graph_distance(read_graph(t.world.encode()), read_graph(t.goal.encode())) > 0 for t in tasks
               if t.meta["changes"])
    assert len({t.meta["changes"] for t in tasks}) == 3 and any(t.answers for t in tasks)
    json.dumps(tasks[0].to_dict())  # write_jsonl-able


def test_world_view_is_canonical_and_bounded():
    a = b'{"type":"entity","name":"A","entityType":"person","observations":["x","y"]}\n' \
        b'{"type":"relation","from":"A","to":"B","relationType":"works_at"}'
    b = b'{"type":"relation","from":"A","to":"B","relationType":"works_at"}\n' \
        b'{"type":"entity","name":"A","entityType":"person","observations":["y","x"]}'
    assert read_graph(a) == read_graph(b) and graph_distance(read_graph(a), read_graph(b)) == 0
    assert read_graph(b"[1]")[0][0] == "unreadable" and read_graph(b"x" * (2 << 20))[0][0] == "unreadable"
    assert graph_distance(read_graph(a), read_graph(b"")) == 4


def test_gymnasium_check_env_and_the_oracle(env):
    gymnasium_check_env(env.unwrapped, skip_render_check=True)
    for seed in range(8):
        env.reset(seed=seed)
        while True:
            *_, reward, term, trunc, info = env.step(env.unwrapped.oracle_action())
            if term or trunc:
                break
        assert reward == 1.0 and info["infra_error"] is None, info["outcome"]


def test_signals_come_from_the_graph_file_read_outside_the_server(env):
    task = next(generate_memory_task(s) for s in range(100) if generate_memory_task(s).meta["changes"] == 1
                and generate_memory_task(s).gold[0]["name"] == "add_observations")
    env.reset(options={"task": task})
    assert env.unwrapped.state.progress == 0.0
    # a call that changes the wrong thing: progress stays, the file (not the server's reply) says so
    obs, *_, info = env.step(call("create_entities", entities=[{"name": "Zed", "entityType": "x", "observations": []}]))
    assert info["signals"]["exec_ok"] == 1.0 and info["signals"]["progress"] == 0.0
    assert ("e", "Zed", "x") in env.unwrapped.state.view
    env.step(call("delete_entities", entityNames=["Zed"]))
    obs, *_, info = env.step(env.unwrapped.oracle_action())
    assert info["signals"]["progress"] == 1.0
    _, reward, term, _, info = env.step("Done.")
    assert term and reward == 1.0 and info["signals"]["state_match"] == 1.0


def test_a_failed_tool_is_the_agents_failure_and_snapshots_restore(env):
    env.reset(seed=3)
    obs, *_, info = env.step(call("add_observations", observations=[{"entityName": "Nobody", "contents": ["x"]}]))
    assert info["signals"]["exec_ok"] == 0.0 and "not found" in obs and info["infra_error"] is None
    snap = env.unwrapped.snapshot()
    env.step(call("delete_entities", entityNames=[i[1] for i in env.unwrapped.state.view if i[0] == "e"]))
    assert env.unwrapped.state.view == ()
    env.unwrapped.restore(snap)
    obs, *_ = env.step(call("read_graph"))
    graph = json.loads(json.loads(obs.split("\n", 1)[1].rsplit("\n", 1)[0])["content"])
    assert {e["name"] for e in graph["entities"]} == {i[1] for i in env.unwrapped.state.view if i[0] == "e"} != set()


def test_listing_every_city_answers_nothing(env):
    task = next(t for t in map(generate_memory_task, range(300)) if t.answers and t.answers[0] in _CITIES)
    for reply, want in ((", ".join(_CITIES), 0.0), (f"They live in {task.answers[0]}.", 1.0)):
        env.reset(options={"task": task})
        for c in task.gold[:-1]:
            env.step(json.dumps(c))
        _, reward, term, _, info = env.step(reply)
        assert term and reward == want, info["outcome"]


def test_ci_installs_the_pinned_server_where_the_env_looks():
    ci = open(os.path.join(os.path.dirname(__file__), "..", "..", ".ci", "run"), encoding="utf-8").read()
    prefix = '"$TURNGYM_CACHE/mcp/npm/' + f'{PACKAGE.replace("/", "+")}@{VERSION}"'
    assert f'"{PACKAGE}@{VERSION}"' in ci and prefix in ci
    # into the cache the suite (and the env server's workers) use: after it is set and emptied
    assert ci.index('rm -rf "$TURNGYM_CACHE"') < ci.index(prefix) < ci.index('bash -c "$TEST_CMD"')
