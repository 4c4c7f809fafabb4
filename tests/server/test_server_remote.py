"""A remote env behaves like the local one: check_env, identical rollouts, same errors."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="needs the server extra: pip install 'turngym[server]'")
pytest.importorskip("starlette", reason="needs the server extra: pip install 'turngym[server]'")

import turngym
from turngym.agents import OracleAgent, RandomAgent
from turngym.core.errors import ConfigError, ResetNeeded, SnapshotError, UnknownEnvError
from turngym.rollout import run_episodes
from turngym.server.client import RemoteEnv, RemoteSnapshot
from turngym.server.testing import ServerThread

ENV_IDS = sorted(turngym.list_envs())


@pytest.fixture(scope="module")
def server():
    # "tasks": test_task_objects_and_ids_cross_the_wire sends whole Task objects (refused by default)
    with ServerThread(ENV_IDS, max_sessions=256, allow_kwargs=("tasks",)) as srv:
        yield srv


def _normalize(obj):
    """JSON round trip: what crosses the wire (tuples become lists)."""
    return json.loads(json.dumps(obj))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_remote_check_env_passes(server, env_id):
    env = turngym.make(env_id, remote=server.url)
    assert isinstance(env, RemoteEnv)
    turngym.check_env(env)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("agent", ["oracle", "random"])
def test_rollout_over_server_equals_in_process(server, env_id, agent):
    seeds = list(range(12))

    def play(make_env):
        policy = OracleAgent() if agent == "oracle" else RandomAgent(seed=5)
        eps = run_episodes(make_env, policy, seeds, batch_size=4, env_id=env_id)
        return [_normalize(ep.to_dict()) for ep in eps]

    local = play(lambda: turngym.make(env_id))
    remote = play(lambda: turngym.make(env_id, remote=server.url))
    assert len(remote) == len(seeds)
    assert remote == local
    assert any(t["signals"] for ep in remote for t in ep["turns"])


def test_step_info_is_the_full_local_info(server):
    local = turngym.make("turngym/Math-v0")
    remote = turngym.make("turngym/Math-v0", remote=server.url)
    assert remote.reward_spec == local.reward_spec
    assert remote.system_prompt == local.system_prompt and remote.max_turns == local.max_turns
    assert local.reset(seed=3) == remote.reset(seed=3)
    while True:
        a = local.oracle_action()
        assert remote.oracle_action() == a
        lo, ro = local.step(a), remote.step(a)
        assert _normalize(lo) == _normalize(list(ro))
        assert remote.turn == local.turn and remote.state_key() == local.state_key()
        if lo[2] or lo[3]:
            break
    assert ro[4]["outcome"]["success"] is True
    remote.close()


def test_errors_arrive_as_the_local_classes(server):
    env = turngym.make("turngym/Math-v0", remote=server.url)
    with pytest.raises(ResetNeeded):
        env.step("<answer>1</answer>")
    with pytest.raises(ConfigError, match="unknown option"):
        env.reset(seed=0, options={"nonsense": 1})
    with pytest.raises(SnapshotError):
        env.restore(RemoteSnapshot(env.session, "nope", 0, ""))
    env.close()
    with pytest.raises(ConfigError, match="max_turns"):
        turngym.make("turngym/Math-v0", remote=server.url, max_turns=0, retries=0)


def test_env_kwargs_reach_the_server(server):
    env = turngym.make("turngym/Math-v0", remote=server.url, max_turns=2)
    assert env.max_turns == 2
    env.reset(seed=0)
    env.step("<calc>1+1</calc>")
    *_, term, trunc, info = env.step("<calc>1+2</calc>")
    assert trunc and not term and info["outcome"]["reason"] == "max_turns"
    env.close()


def test_unserved_id_is_refused_with_the_list_of_served_ids():
    import asyncio

    from turngym.envs.math.env import MathEnv
    from turngym.server.client import AsyncRemoteEnv

    with ServerThread(factories={"turngym/Math-v0": lambda **kw: MathEnv(**kw)}, executor="thread") as srv:
        with pytest.raises(UnknownEnvError, match="serves: turngym/Math-v0"):
            asyncio.run(AsyncRemoteEnv(srv.url, "turngym/Other-v0", retries=0).connect())


def test_sample_action_draws_what_the_local_env_would(server):
    local = turngym.make("turngym/Math-v0")
    remote = turngym.make("turngym/Math-v0", remote=server.url)
    local.reset(seed=1)
    remote.reset(seed=1)
    r1, r2 = np.random.default_rng(42), np.random.default_rng(42)
    for _ in range(20):
        assert remote.sample_action(r2) == local.sample_action(r1)
        assert r1.bit_generator.state == r2.bit_generator.state
    remote.close()


def test_snapshot_restore_branches_on_the_server(server):
    env = turngym.make("turngym/Math-v0", remote=server.url)
    env.reset(seed=4)
    env.step(env.oracle_action())
    snap = env.snapshot()
    first = [env.step(a)[:4] for a in ("<calc>2*3</calc>", "<calc>7-1</calc>")]
    env.restore(snap)
    assert env.turn == 1 and env.state_key() == snap.state_key
    assert [env.step(a)[:4] for a in ("<calc>2*3</calc>", "<calc>7-1</calc>")] == first
    env.release(snap)
    with pytest.raises(SnapshotError, match="released or evicted"):
        env.restore(snap)
    other = turngym.make("turngym/Math-v0", remote=server.url)
    other.reset(seed=4)
    with pytest.raises(SnapshotError, match="belongs to session"):
        other.restore(env.snapshot())
    env.close()
    other.close()


def test_task_objects_and_ids_cross_the_wire(server):
    local = turngym.make("turngym/Math-v0")
    remote = turngym.make("turngym/Math-v0", remote=server.url)
    local.reset(seed=9)
    task = local.task
    assert remote.reset(options={"task": task}) == local.reset(options={"task": task})
    assert remote.task == task
    assert remote.reset(options={"task": task.id})[1]["task_id"] == task.id
    remote.close()


def test_http_episode_route_replays_an_episode_statelessly(server):
    env = turngym.make("turngym/Math-v0")
    obs, info = env.reset(seed=7)
    actions, steps = [], []
    while True:
        actions.append(env.oracle_action())
        o, r, term, trunc, i = env.step(actions[-1])
        steps.append({"obs": o, "reward": r, "terminated": term, "truncated": trunc, "info": i})
        if term or trunc:
            break
    body = {"seed": 7, "actions": actions + ["<answer>0</answer>"]}
    reply = httpx.post(f"{server.http_url}/v1/envs/turngym/Math-v0/episode", json=body, timeout=30).json()
    assert reply["ok"] and reply["obs"] == obs and reply["info"] == info
    assert reply["steps"] == _normalize(steps) and reply["unused_actions"] == 1
    bad = httpx.post(f"{server.http_url}/v1/envs/turngym/Nope-v0/episode", json={}, timeout=30)
    assert bad.status_code == 404 and bad.json()["error"]["type"] == "UnknownEnvError"


def test_health_and_env_listing(server):
    health = httpx.get(f"{server.http_url}/health", timeout=10).json()
    assert health["status"] == "healthy" and health["envs"] == ENV_IDS
    envs = httpx.get(f"{server.http_url}/v1/envs", timeout=10).json()["envs"]
    assert [e["env_id"] for e in envs] == ENV_IDS
    assert all(e["reward_spec"]["signals"] for e in envs)


def test_malformed_frames_get_error_replies_and_the_session_survives(server):
    import asyncio

    from websockets.asyncio.client import connect

    from turngym.server.protocol import dumps, loads

    async def talk():
        async with connect(server.url + "/v1/session") as ws:
            await ws.send("not json")
            first = loads(await ws.recv())
            assert first["ok"] is False and "make" in first["error"]["message"]
        async with connect(server.url + "/v1/session") as ws:
            await ws.send(dumps({"op": "make", "env_id": "turngym/Math-v0", "kwargs": {}}).encode())  # binary frame
            assert loads(await ws.recv())["ok"]
            replies = []
            for frame in ("{broken", dumps({"op": "fly"}), dumps([1, 2]), dumps({"op": "reset", "seed": "x"})):
                await ws.send(frame)
                replies.append(loads(await ws.recv()))
            assert [r["ok"] for r in replies] == [False] * 4
            assert "unknown op" in replies[1]["error"]["message"]
            assert replies[3]["error"]["type"] == "ConfigError"
            await ws.send(dumps({"op": "reset", "seed": 0}))
            assert loads(await ws.recv())["ok"]

    asyncio.run(talk())


def test_serve_command_and_config_validation():
    from turngym.cli import build_parser
    from turngym.server.sessions import ServerConfig

    args = build_parser().parse_args(["serve", "turngym/Math-v0", "--port", "9", "--max-sessions", "5",
                                      "--executor", "inline", "--env-arg", "max_turns=3"])
    assert (args.env_ids, args.port, args.max_sessions, args.executor) == (["turngym/Math-v0"], 9, 5, "inline")
    assert args.host == "127.0.0.1"  # loopback unless asked otherwise
    assert build_parser().parse_args(["serve", "turngym/Math-v0"]).executor == "process"  # isolation by default
    args = build_parser().parse_args(["serve", "turngym/Code-v0", "--token", "t0ken-t0ken", "--allow-kwarg", "sandbox",
                                      "--allow-kwarg", "tasks", "--max-per-client", "4", "--header-timeout", "2",
                                      "--first-frame-timeout", "3", "--processes", "2", "--max-message-mb", "1"])
    assert (args.token, args.allow_kwarg, args.max_per_client) == ("t0ken-t0ken", ["sandbox", "tasks"], 4)
    assert (args.header_timeout, args.first_frame_timeout, args.processes) == (2.0, 3.0, 2)
    for bad in ({"max_sessions": 0}, {"executor": "gpu"}, {"idle_timeout_s": 0}, {"token": "short"},
                {"max_per_client": 0}, {"header_timeout_s": 0}, {"processes": 0}, {"max_message_bytes": 10}):
        with pytest.raises(ConfigError):
            ServerConfig(env_ids=("turngym/Math-v0",), **bad)
    with pytest.raises(ConfigError, match="at least one"):
        ServerConfig(env_ids=())
    with pytest.raises(UnknownEnvError, match="Did you mean"):
        from turngym.server.app import create_app

        create_app(["turngym/Maths-v0"])


def test_a_lone_surrogate_action_is_judged_remotely_as_locally_not_an_infra_error():
    # a lone surrogate is a valid Python str (JSON "\ud800" from a model server decodes to one) but
    # no UTF-8: the frame could not be sent, the connection dropped and the agent's action ended
    # its episode as an infra error (dropped from every score) instead of being judged
    from turngym.server.protocol import dumps, loads

    msg = {"op": "step", "action": "<calc>\ud800</calc> and \ud800 \u00e9"}
    frame = dumps(msg)
    frame.encode("utf-8")  # sendable
    assert loads(frame) == msg
    assert "\u00e9" in dumps({"a": "\u00e9"})  # a frame without surrogates stays unescaped

    class Surrogates:
        """Test double of an agent whose decoding yields lone surrogates: a bare one, then inside a tag."""

        name = "surrogates"

        def __init__(self):
            self.calls = 0

        def act(self, batch):
            from turngym.agents import Action

            self.calls += 1
            return [Action("\ud800" if self.calls % 2 else "<calc>\ud800</calc>") for _ in batch]

    def play(**kw):
        [ep] = run_episodes(lambda: turngym.make("turngym/Math-v0", max_turns=2, **kw), Surrogates(), [0], batch_size=1)
        return ep

    with ServerThread(["turngym/Math-v0"]) as srv:
        remote = play(remote=srv.url)
    local = play()
    assert remote.infra_error is None
    assert [t.action_valid for t in remote.turns] == [t.action_valid for t in local.turns]
    assert [t.observation for t in remote.turns] == [t.observation for t in local.turns]
