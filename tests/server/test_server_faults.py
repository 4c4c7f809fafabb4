"""Faults: disconnects free sessions, limits and timeouts hold, a dead server is an infra error."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("uvicorn", reason="needs the server extra: pip install 'turngym[server]'")
pytest.importorskip("starlette", reason="needs the server extra: pip install 'turngym[server]'")
from websockets.asyncio.client import connect

import turngym
from turngym.agents import OracleAgent
from turngym.core.errors import ResetNeeded
from turngym.envs.math.env import MathEnv
from turngym.rollout import run_episodes, summarize
from turngym.server.client import AsyncRemoteEnv, RemoteEnv
from turngym.server.errors import ConnectionLost, ServerBusy
from turngym.server.protocol import dumps, loads
from turngym.server.testing import ServerThread, free_port

MATH = "turngym/Math-v0"


class ProbeMathEnv(MathEnv):
    """Test double: the math env, counting closes, with a ``<sleep>`` action that stalls."""

    closed: list[int] = []

    def _step(self, action):
        if action.startswith("<sleep>"):
            time.sleep(float(action[len("<sleep>"):]))
        return super()._step(action)

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        if action == "<unencodable>":
            info["handle"] = object()  # an env bug: info that cannot cross the wire
        return obs, reward, term, trunc, info

    def close(self):
        ProbeMathEnv.closed.append(id(self))
        super().close()


def _probe_server(**config):
    # thread executor: these tests watch the probe env's class-level state from this process
    config.setdefault("executor", "thread")
    return ServerThread(factories={MATH: lambda **kw: ProbeMathEnv(**{"max_turns": 10, **kw})}, **config)


def _wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_client_disconnect_mid_episode_frees_its_session():
    ProbeMathEnv.closed.clear()
    with _probe_server(max_sessions=1) as srv:

        async def abandon():
            ws = await connect(srv.url + "/v1/session")
            await ws.send(dumps({"op": "make", "env_id": MATH, "kwargs": {}}))
            assert loads(await ws.recv())["ok"]
            await ws.send(dumps({"op": "reset", "seed": 0}))
            await ws.recv()
            await ws.send(dumps({"op": "step", "action": "<calc>1+1</calc>"}))
            await ws.recv()
            ws.transport.abort()  # vanish mid-episode, no close handshake

        asyncio.run(abandon())
        # the slot is freed first, then the env is closed on the pool: wait for both
        _wait_for(lambda: srv.manager.active == 0 and len(ProbeMathEnv.closed) >= 2)
        assert len(ProbeMathEnv.closed) >= 2  # the startup probe env + the abandoned session's env
        env = RemoteEnv(srv.url, MATH, retries=0)  # the only slot is free again
        assert env.reset(seed=0)[0]
        env.close()


def test_session_limit_refuses_extra_connections_with_server_busy():
    with _probe_server(max_sessions=2) as srv:
        a, b = RemoteEnv(srv.url, MATH), RemoteEnv(srv.url, MATH)
        with pytest.raises(ServerBusy, match="capacity"):
            RemoteEnv(srv.url, MATH, retries=0)
        assert srv.manager.stats["refused"] == 1
        a.close()
        _wait_for(lambda: srv.manager.active == 1)
        c = RemoteEnv(srv.url, MATH, retries=0)
        b.close()
        c.close()


def test_idle_session_is_closed_and_the_client_recovers_on_reset():
    with _probe_server(idle_timeout_s=0.4) as srv:
        env = RemoteEnv(srv.url, MATH, retries=1, backoff=0.05)
        env.reset(seed=0)
        time.sleep(1.5)
        assert srv.manager.active == 0 and srv.manager.stats["idle_closed"] == 1
        *_, term, trunc, info = env.step("<calc>1+1</calc>")
        assert term and info["infra_error"] and info["outcome"]["reason"] == "infra_error"
        with pytest.raises(ResetNeeded, match="session was lost"):
            env.step("<calc>1+1</calc>")
        obs, _ = env.reset(seed=0)  # reconnects to a fresh session
        assert obs and env.step("<calc>1+1</calc>")[4]["infra_error"] is None
        env.close()


def test_step_past_its_deadline_ends_the_episode_as_the_agents_failure_and_closes_the_session():
    with _probe_server(request_timeout_s=0.3, executor="thread") as srv:
        env = RemoteEnv(srv.url, MATH, retries=1, backoff=0.05)
        env.reset(seed=0)
        *_, term, trunc, info = env.step("<sleep>1.0")
        assert term and info["infra_error"] is None and info["action_valid"] is False
        assert "longer than 0.3" in info["invalid_reason"] and info["outcome"]["reason"] == "step_timeout"
        assert srv.manager.stats["timeouts"] == 1
        _wait_for(lambda: srv.manager.active == 0)
        env.reset(seed=0)
        assert env.step("<calc>2*2</calc>")[0] == "<result>4</result>"
        env.close()


def test_graceful_shutdown_closes_every_env_and_every_connection():
    ProbeMathEnv.closed.clear()
    srv = _probe_server().start()
    envs = [RemoteEnv(srv.url, MATH, retries=0) for _ in range(3)]
    for e in envs:
        e.reset(seed=1)
    srv.stop()
    assert len(ProbeMathEnv.closed) == 1 + 3
    for e in envs:  # clients see the loss as an infra error, not a crash
        assert e.step("<calc>1+1</calc>")[4]["infra_error"]
        with pytest.raises(ConnectionLost):
            e.reset(seed=1)


def test_server_killed_mid_rollout_surfaces_as_infra_error_and_the_rollout_goes_on(tmp_path):
    port = free_port()
    code = "import sys; from turngym.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", MATH, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        _wait_for(lambda: _healthy(port), timeout=30)
        url = f"ws://127.0.0.1:{port}"
        finished = []

        def on_episode(ep):
            finished.append(ep)
            if len(finished) == 6:
                os.killpg(proc.pid, signal.SIGKILL)  # the server dies with episodes in flight
                proc.wait(10)

        seeds = list(range(20))
        episodes = run_episodes(
            lambda: turngym.make(MATH, remote=url, retries=1, backoff=0.01),
            OracleAgent(), seeds, batch_size=4, env_id=MATH, on_episode=on_episode,
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert [ep.seed for ep in episodes] == seeds
    lost = [ep for ep in episodes if ep.infra_error]
    assert all(ep.infra_error is None and ep.success for ep in finished[:6])
    assert len(lost) == len(seeds) - 6
    in_flight = [ep for ep in lost if ep.turns]  # were mid-episode when the server died
    assert in_flight and all(ep.turns[-1].infra_error and ep.turns[-1].terminated for ep in in_flight)
    summary = summarize(episodes, env_id=MATH, agent="oracle")
    assert summary.infra_errors == len(lost) and summary.success_rate == 1.0


def _healthy(port):
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_async_client_runs_many_concurrent_sessions():
    with ServerThread([MATH], max_sessions=200) as srv:

        async def play(seed):
            async with AsyncRemoteEnv(srv.url, MATH) as env:
                await env.reset(seed=seed)
                while True:
                    *_, term, trunc, info = await env.step(await env.oracle_action())
                    if term or trunc:
                        return info["outcome"]["success"]

        async def main():
            return await asyncio.gather(*(play(s) for s in range(100)))

        assert all(asyncio.run(main()))
        _wait_for(lambda: srv.manager.active == 0)
        assert srv.manager.stats["opened"] == 100


def test_remote_envs_are_usable_from_many_threads():
    with ServerThread([MATH]) as srv:
        results = []

        def worker(seed):
            env = turngym.make(MATH, remote=srv.url)
            env.reset(seed=seed)
            while True:
                *_, term, trunc, info = env.step(env.oracle_action())
                if term or trunc:
                    results.append(info["outcome"]["success"])
                    env.close()
                    return

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == [True] * 8


def test_auto_executor_runs_fast_envs_inline_and_moves_slow_ones_to_the_pool():
    # generous threshold: pool timings include GIL waits (server and client share this process)
    with _probe_server(executor="auto", inline_below_ms=30.0) as srv:
        env = RemoteEnv(srv.url, MATH)
        assert srv.manager.executor_of(MATH) == "thread"  # measured on the pool first
        for k in range(40):
            if env.done:
                env.reset(seed=k)
            env.step("<calc>1+1</calc>")
        assert srv.manager.executor_of(MATH) == "inline"
        health = httpx.get(f"{srv.http_url}/health", timeout=5).json()
        assert health["executors"] == {MATH: "inline"}
        for k in range(12):
            if env.done:
                env.reset(seed=k)
            env.step("<sleep>0.12")
        assert srv.manager.executor_of(MATH) == "thread"
        env.close()


def test_an_env_bug_is_a_clear_error_and_the_session_survives():
    from turngym.server.errors import RemoteEnvError

    with _probe_server() as srv:
        env = RemoteEnv(srv.url, MATH)
        env.reset(seed=0)
        with pytest.raises(RemoteEnvError, match="TypeError.*object.*on the server"):
            env.step("<unencodable>")
        assert env.step("<calc>3*3</calc>")[0] == "<result>9</result>"
        env.close()


def test_an_action_with_lone_surrogates_is_the_agents_own_transition_not_an_infra_error():
    """An agent must not turn its action into an infra error (an unscored episode): lone
    surrogates cannot be sent as raw UTF-8, so frames holding them go escaped, and the server
    env answers exactly as the same env does in-process."""
    actions = ["<answer>\ud800</answer>", "é\udfff中" * 3, "<calc>\ud800</calc>"]
    assert loads(dumps({"action": actions[1]}).encode())["action"] == actions[1]  # valid UTF-8, same string back
    with ServerThread([MATH]) as srv:
        remote, local = RemoteEnv(srv.url, MATH), MathEnv()
        for action in actions:
            remote.reset(seed=0)
            local.reset(seed=0)
            *got, info = remote.step(action)
            *want, want_info = local.step(action)
            assert info.get("infra_error") is None, info["infra_error"]
            assert (got, info["action_valid"]) == (want, want_info["action_valid"])
        remote.close()
