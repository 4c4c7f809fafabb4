"""Red team: a hostile client of the env server, through the real server on 127.0.0.1.

Every attack here was played against the server as it was: client kwargs that choose the
sandbox, host paths, URLs and huge sizes; Task objects pointing at host files; no token; one
action that holds the GIL and freezes everything; sockets that never finish their headers or
never send a first frame; a client that hangs up mid-step. Each test asserts the contained
outcome. Traffic goes to 127.0.0.1 only and every loop is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("uvicorn", reason="needs the server extra: pip install 'turngym[server]'")
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from turngym.core.errors import ConfigError
from turngym.server.client import AsyncRemoteEnv, RemoteEnv
from turngym.server.protocol import dumps, loads
from turngym.server.testing import GilHoldingTestEnv, ServerThread

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MATH, CODE, SWE, SEARCH = "turngym/Math-v0", "turngym/Code-v0", "turngym/SWE-v0", "turngym/SearchQA-v0"


def _make_frame(url: str, env_id: str, kwargs: dict, **connect_kw) -> dict:
    async def go() -> dict:
        async with connect(url + "/v1/session", **connect_kw) as ws:
            await ws.send(dumps({"op": "make", "env_id": env_id, "kwargs": kwargs}))
            return loads(await asyncio.wait_for(ws.recv(), 30))

    return asyncio.run(go())


# ------------------------------------------------------------------------ constructor kwargs
@pytest.fixture(scope="module")
def open_server():
    with ServerThread([MATH, CODE, SWE, SEARCH], processes=1) as srv:
        yield srv


KWARG_ATTACKS = [
    (CODE, {"sandbox": "rlimit"}, "sandbox"),  # agent code as uid 0 on the host
    (CODE, {"run_limits": {"cpu_s": -1}}, "run_limits"),  # breaks every step
    (CODE, {"limits": {"cpu_s": -1}}, "limits"),  # the same, under the argument's current name
    (SWE, {"limits": {"memory_mb": 1 << 30}}, "limits"),  # lifts the sandbox's memory bound
    (CODE, {"tasks": "/etc"}, "tasks"),  # probes the host filesystem
    (CODE, {"per_test_s": 1e9}, "per_test_s"),
    (SWE, {"tasks": "/etc/passwd"}, "tasks"),
    (SWE, {"repo_dirs": {"x": "/"}}, "repo_dirs"),
    (SWE, {"swebench": "/root"}, "swebench"),
    (SWE, {"backend": "docker"}, "backend"),
    (SEARCH, {"retriever": "http://127.0.0.1:9/steal"}, "retriever"),  # server-side request forgery
    (SEARCH, {"kb_entities": 10_000_000}, "kb_entities"),  # a minute of CPU per session
    (SEARCH, {"kb_entities": 1e7}, "kb_entities"),
    (SEARCH, {"corpus": "/etc/passwd"}, "corpus"),
    (SEARCH, {"retriever": "dense"}, "retriever"),
    (MATH, {"tasks": "/etc/passwd"}, "tasks"),
    (MATH, {"max_turns": 10**9}, "max_turns"),
    (MATH, {"max_steps": float("nan")}, "max_steps"),
    (MATH, {"max_obs_chars": True}, "max_obs_chars"),
    (MATH, {"__class__": "x"}, "__class__"),
]


@pytest.mark.parametrize(("env_id", "kwargs", "name"), KWARG_ATTACKS, ids=[f"{a[0][8:]}-{a[2]}" for a in KWARG_ATTACKS])
def test_client_constructor_kwargs_outside_the_declared_list_are_refused(open_server, env_id, kwargs, name):
    opened = open_server.manager.stats["opened"]
    reply = _make_frame(open_server.url, env_id, kwargs)
    assert reply["ok"] is False and reply["error"]["type"] == "ConfigError"
    assert repr(name) in reply["error"]["message"]
    if name not in ("max_turns", "max_steps", "max_obs_chars", "kb_entities", "per_test_s", "retriever"):
        assert f"--allow-kwarg {name}" in reply["error"]["message"]
    assert open_server.manager.stats["opened"] == opened  # refused before any env was built
    # the stateless HTTP route applies the same policy
    r = httpx.post(f"{open_server.http_url}/v1/envs/{env_id}/episode",
                   content=dumps({"kwargs": kwargs, "actions": []}), timeout=30)
    assert r.status_code == 400 and repr(name) in r.json()["error"]["message"]


def test_declared_kwargs_in_range_still_work(open_server):
    env = RemoteEnv(open_server.url, MATH, max_turns=3, min_steps=2, max_steps=3)
    assert env.max_turns == 3
    env.reset(seed=0)
    env.close()
    with pytest.raises(ConfigError, match="--allow-kwarg sandbox"):
        RemoteEnv(open_server.url, CODE, sandbox="rlimit", retries=0)


def test_client_task_objects_are_refused_in_reset_options(open_server):
    # an SWE task whose repo is a host path would let view_file read host files
    hostile = {"__task__": "turngym.envs.swe.tasks:SWETask",
               "data": {"id": "x", "prompt": "p", "repo": "/etc", "path": "passwd"}}
    math_task = {"__task__": "turngym.envs.math.tasks:MathTask", "data": {"id": "m", "prompt": "1+1"}}

    async def go(env_id: str, task: object) -> dict:
        async with connect(open_server.url + "/v1/session") as ws:
            await ws.send(dumps({"op": "make", "env_id": env_id}))
            assert loads(await ws.recv())["ok"]
            await ws.send(dumps({"op": "reset", "seed": 0, "options": {"task": task}}))
            return loads(await asyncio.wait_for(ws.recv(), 30))

    for env_id, task in ((SWE, hostile), (MATH, math_task), (MATH, ["list"]), (MATH, "x" * 10_000)):
        reply = asyncio.run(go(env_id, task))
        assert reply["ok"] is False and reply["error"]["type"] == "ConfigError", reply
    assert "--allow-kwarg tasks" in asyncio.run(go(SWE, hostile))["error"]["message"]
    # over OpenEnv's protocol too
    async def openenv() -> dict:
        async with connect(open_server.url + f"/openenv/{SWE}/ws") as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": 0, "task": hostile}}))
            return json.loads(await asyncio.wait_for(ws.recv(), 30))

    reply = asyncio.run(openenv())
    assert reply["type"] == "error" and "may only be a task id" in reply["data"]["message"]


# ---------------------------------------------------------------------------------- token
TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def token_server():
    with ServerThread([MATH], token=TOKEN, processes=1) as srv:
        yield srv


def test_token_is_required_on_every_route_but_health(token_server):
    url, http = token_server.url, token_server.http_url
    assert httpx.get(f"{http}/health", timeout=10).status_code == 200
    for path in ("/v1/envs", "/schema", "/metadata"):
        assert httpx.get(f"{http}{path}", timeout=10).status_code == 401
        assert httpx.get(f"{http}{path}", headers={"Authorization": "Bearer wrong-token-xx"}, timeout=10).status_code == 401
        assert httpx.get(f"{http}{path}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code == 200
    r = httpx.post(f"{http}/v1/envs/{MATH}/episode", json={"actions": []}, timeout=10)
    assert r.status_code == 401
    for path in ("/v1/session", "/ws", f"/openenv/{MATH}/ws"):
        with pytest.raises(InvalidStatus) as exc:
            asyncio.run(_connect_only(url + path))
        assert exc.value.response.status_code == 403
        with pytest.raises(InvalidStatus):
            asyncio.run(_connect_only(url + path, additional_headers={"Authorization": "Bearer nope-nope-nope"}))
    assert asyncio.run(_connect_only(url + f"/ws?token={TOKEN}"))  # OpenEnv clients without headers
    with pytest.raises(ConfigError, match="requires a token"):
        RemoteEnv(url, MATH, retries=0)
    env = RemoteEnv(url, MATH, token=TOKEN)
    env.reset(seed=0)
    assert env.step("<calc>2+2</calc>")[0] == "<result>4</result>"
    env.close()


async def _connect_only(url: str, **kw) -> bool:
    async with connect(url, **kw):
        return True


# ---------------------------------------------------------------- a step that freezes a server
_PROBE = r"""
import json, sys, time, urllib.request
url, seconds = sys.argv[1], float(sys.argv[2])
lat, end = [], time.monotonic() + seconds
while time.monotonic() < end:
    t = time.monotonic()
    try:
        urllib.request.urlopen(url, timeout=30).read()
        lat.append(time.monotonic() - t)
    except Exception as exc:
        lat.append(float("inf"))
    time.sleep(0.05)
print(json.dumps(lat))
"""


class HealthProbe:
    """Polls /health from another process (a frozen server thread would freeze an in-process probe too)."""

    def __init__(self, http_url: str, seconds: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _PROBE, f"{http_url}/health", str(seconds)],
                                     stdout=subprocess.PIPE, text=True)

    def result(self) -> list[float]:
        out, _ = self.proc.communicate(timeout=120)
        return json.loads(out)


def _hold_server(**config):
    config = {"processes": 1, "request_timeout_s": 2.0, **config}
    return ServerThread(factories={MATH: GilHoldingTestEnv}, **config)


def test_health_answers_within_1s_while_a_gil_holding_step_runs_and_the_step_is_the_agents_failure():
    with _hold_server() as srv:
        hostile = RemoteEnv(srv.url, MATH)
        bystander = RemoteEnv(srv.url, MATH)  # same (only) worker: it dies with the hostile step
        hostile.reset(seed=0)
        bystander.reset(seed=0)
        probe = HealthProbe(srv.http_url, 3.0)
        time.sleep(0.5)  # the probe is polling
        t0 = time.monotonic()
        obs, reward, term, trunc, info = hostile.step("<hold>30</hold>")
        took = time.monotonic() - t0
        lat = probe.result()
        assert took < 10, f"the hostile step was answered after {took:.1f} s (deadline 2 s)"
        assert max(lat) < 1.0, f"health p50 {statistics.median(lat):.3f} s, max {max(lat):.3f} s"
        assert term and info["action_valid"] is False and info["infra_error"] is None
        assert info["invalid_reason"].startswith("step_timeout") and info["outcome"]["reason"] == "step_timeout"
        # the bystander is told, as an infrastructure error, and recovers on reset
        *_, bterm, _, binfo = bystander.step("<calc>1+1</calc>")
        assert bterm and "another session's step ran past" in binfo["infra_error"]
        bystander.reset(seed=1)
        assert bystander.step("<calc>2*3</calc>")[0] == "<result>6</result>"
        hostile.reset(seed=0)  # a fresh worker serves new sessions
        assert hostile.step("<calc>2*3</calc>")[0] == "<result>6</result>"
        assert srv.manager.stats["worker_kills"] >= 1
        hostile.close()
        bystander.close()


@pytest.mark.parametrize("action", ["<answer>10**10**10</answer>", "<calc>" * 40000],
                         ids=["huge-power-answer", "calc-tag-flood"])
def test_real_hostile_math_actions_cannot_stall_health(action):
    with ServerThread([MATH], processes=1, request_timeout_s=3.0) as srv:
        env = RemoteEnv(srv.url, MATH)
        env.reset(seed=0)
        probe = HealthProbe(srv.http_url, 2.0)
        time.sleep(0.3)
        t0 = time.monotonic()
        *_, term, _, info = env.step(action)
        took = time.monotonic() - t0
        lat = probe.result()
        assert took < 10 and max(lat) < 1.0, (took, max(lat))
        assert info["infra_error"] is None  # contained either as a normal (invalid) turn or a timed-out step
        env.close()


def test_a_client_that_disconnects_mid_step_does_not_block_health():
    with _hold_server() as srv:
        async def hang_up() -> None:
            async with connect(srv.url + "/v1/session") as ws:
                await ws.send(dumps({"op": "make", "env_id": MATH}))
                await ws.recv()
                await ws.send(dumps({"op": "reset", "seed": 0}))
                await ws.recv()
                await ws.send(dumps({"op": "step", "action": "<hold>30</hold>"}))
                await asyncio.sleep(0.2)  # the step is running; hang up without waiting

        probe = HealthProbe(srv.http_url, 3.0)
        asyncio.run(hang_up())
        lat = probe.result()
        assert max(lat) < 1.0, f"health max {max(lat):.3f} s"
        deadline = time.monotonic() + 10
        while srv.manager.active and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.manager.active == 0


# ----------------------------------------------------------------------- connection hygiene
@pytest.fixture(scope="module")
def tight_server():
    with ServerThread([MATH], processes=1, max_sessions=6, max_per_client=12, header_timeout_s=1.0,
                      first_frame_timeout_s=1.0) as srv:
        yield srv


def _wait_closed(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the server closes ``sock`` (None if still open after ``timeout``)."""
    sock.settimeout(timeout)
    t0 = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - t0


def test_slowloris_headers_are_cut(tight_server):
    socks = []
    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", tight_server.port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        socks.append(s)
    r = httpx.get(f"{tight_server.http_url}/health", timeout=5)  # the server still answers
    assert r.status_code == 200
    try:
        for s in socks:
            s.sendall(b"X-Slow: 1\r\n")  # dribbling more bytes does not extend the deadline
        closed = [_wait_closed(s, 4.0) for s in socks]
    finally:
        for s in socks:
            s.close()
    assert all(c is not None for c in closed), closed


def test_websockets_without_a_first_frame_count_toward_sessions_and_are_cut(tight_server):
    async def go() -> tuple[list[int | None], bool]:
        idle = [await connect(tight_server.url + "/v1/session") for _ in range(6)]
        with pytest.raises(Exception) as exc:  # at capacity: idle sockets count
            await AsyncRemoteEnv(tight_server.url, MATH, retries=0).connect()
        assert "capacity" in str(exc.value)
        codes = []
        for ws in idle:
            try:
                await asyncio.wait_for(ws.recv(), 4.0)
            except ConnectionClosed as closed:
                codes.append(closed.rcvd.code if closed.rcvd else None)
        env = await AsyncRemoteEnv(tight_server.url, MATH, retries=0).connect()  # room again
        await env.close()
        return codes, True

    codes, ok = asyncio.run(go())
    assert codes == [1008] * 6 and ok
    assert tight_server.manager.pending == 0


def test_per_client_connection_cap(tight_server):
    socks = [socket.create_connection(("127.0.0.1", tight_server.port), timeout=5) for _ in range(12)]
    try:
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", tight_server.port), timeout=5)
        t = _wait_closed(extra, 2.0)
        extra.close()
        assert t is not None and t < 0.5  # cut on arrival, before any request
    finally:
        for s in socks:
            s.close()
    time.sleep(0.3)
    assert httpx.get(f"{tight_server.http_url}/health", timeout=5).status_code == 200


def test_oversized_frames_and_bodies_are_refused():
    with ServerThread([MATH], processes=1, max_message_bytes=64 * 1024) as srv:
        r = httpx.post(f"{srv.http_url}/v1/envs/{MATH}/episode", content=b"[" + b"1," * 100_000 + b"1]", timeout=10)
        assert r.status_code == 400 and "limit" in r.json()["error"]["message"]

        async def big() -> int | None:
            async with connect(srv.url + "/v1/session", max_size=None) as ws:
                await ws.send(dumps({"op": "make", "env_id": MATH}))
                await ws.recv()
                await ws.send("x" * 200_000)
                try:
                    await asyncio.wait_for(ws.recv(), 5)
                except ConnectionClosed as exc:
                    return exc.rcvd.code if exc.rcvd else None
            return None

        assert asyncio.run(big()) == 1009  # message too big


def test_concurrent_sessions_keep_working_while_one_step_is_hostile():
    with _hold_server(processes=2) as srv:
        results: dict[str, object] = {}

        def hostile() -> None:
            env = RemoteEnv(srv.url, MATH)
            env.reset(seed=0)
            results["hostile"] = env.step("<hold>30</hold>")[4]["invalid_reason"]

        t = threading.Thread(target=hostile)
        t.start()
        time.sleep(0.3)
        env = RemoteEnv(srv.url, MATH)  # lands on the other worker (least loaded)
        env.reset(seed=3)
        t0 = time.monotonic()
        for _ in range(20):
            env.step("<calc>1+1</calc>") if not env.done else env.reset(seed=3)
        assert time.monotonic() - t0 < 1.5  # 20 steps, not stuck behind the hostile one
        t.join(15)
        assert str(results["hostile"]).startswith("step_timeout")
        env.close()


def test_openenv_step_past_its_deadline_is_an_invalid_final_turn():
    with _hold_server() as srv:
        async def go() -> dict:
            async with connect(srv.url + "/ws") as ws:
                await ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
                await asyncio.wait_for(ws.recv(), 30)
                await ws.send(json.dumps({"type": "step", "data": {"text": "<hold>30</hold>"}}))
                return json.loads(await asyncio.wait_for(ws.recv(), 15))

        probe = HealthProbe(srv.http_url, 2.5)
        reply = asyncio.run(go())
        assert max(probe.result()) < 1.0
        obs = reply["data"]["observation"]
        assert reply["data"]["done"] and obs["terminated"] and obs["action_valid"] is False
        assert obs["invalid_reason"].startswith("step_timeout") and obs["infra_error"] is None


# ------------------------------------------------------------------ who is blamed when a worker dies
def _play_concurrently(srv, plays: dict[str, tuple[str, float]]) -> dict[str, tuple]:
    """Open one session per name, reset all, then send each its action after its delay (s); the step results."""
    envs = {name: RemoteEnv(srv.url, MATH) for name in plays}
    for env in envs.values():
        env.reset(seed=0)
    results: dict[str, tuple] = {}

    def play(name: str) -> None:
        action, delay = plays[name]
        time.sleep(delay)
        results[name] = envs[name].step(action)

    threads = [threading.Thread(target=play, args=(name,)) for name in plays]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for env in envs.values():
        env.close()
    return results


def _agent_failure(step: tuple, reason: str) -> bool:
    *_, term, _, info = step
    return (term and info["action_valid"] is False and info["infra_error"] is None
            and info["outcome"]["reason"] == reason and info["invalid_reason"].startswith(reason))


def _infra(step: tuple) -> str:
    *_, term, _, info = step
    assert term and info["action_valid"] is True and info["outcome"]["reason"] == "infra_error", info
    return info["infra_error"]


def test_deadline_blame_lands_on_the_step_that_burns_the_worker_not_on_the_one_it_starved():
    # the innocent step starts first and waits without the GIL; the hostile one then holds the GIL,
    # so the innocent step cannot finish and its deadline comes first: it must not be charged
    with _hold_server() as srv:
        probe = HealthProbe(srv.http_url, 3.5)
        time.sleep(0.3)
        res = _play_concurrently(srv, {"innocent": ("<sleep>0.5</sleep>", 0.0), "hostile": ("<hold>30</hold>", 0.25)})
        assert max(probe.result()) < 1.0
    assert _agent_failure(res["hostile"], "step_timeout"), res["hostile"][4]
    why = _infra(res["innocent"])
    assert "another session's step ran past" in why and "not this agent's failure" in why


def test_time_queued_behind_other_steps_does_not_count_toward_a_deadline():
    # one thread per worker: the second step waits 1.4 s for the first, then runs 1.4 s (deadline 2 s)
    with _hold_server(threads=1) as srv:
        res = _play_concurrently(srv, {"first": ("<sleep>1.4</sleep>", 0.0), "second": ("<sleep>1.4</sleep>", 0.1)})
    for name in ("first", "second"):
        obs, _, _, _, info = res[name]
        assert info["infra_error"] is None and info["action_valid"] is True, (name, info)
        assert obs == "<result>2</result>"


@pytest.mark.parametrize("crash", ["<crash>SIGSEGV</crash>", "<crash>SIGABRT</crash>", "<exit>3</exit>"])
def test_a_step_that_crashes_its_worker_is_that_agents_failure_and_only_that_agents(crash):
    with _hold_server(request_timeout_s=10.0) as srv:
        idle = RemoteEnv(srv.url, MATH)  # same worker, between calls
        idle.reset(seed=0)
        plays = {"crasher": (crash, 0.3), "busy": ("<sleep>2</sleep>", 0.0)}
        if crash.startswith("<exit>"):  # no crash report names a thread: blame needs the crasher to run alone
            plays = {"crasher": (crash, 0.0)}
        res = _play_concurrently(srv, plays)
        assert _agent_failure(res["crasher"], "worker_crash"), res["crasher"][4]
        if "busy" in res:
            assert "crashed it" in _infra(res["busy"])
        assert "not this agent's failure" in _infra(idle.step("<calc>1+1</calc>"))
        idle.reset(seed=1)  # a fresh worker serves it
        assert idle.step("<calc>2*3</calc>")[0] == "<result>6</result>"
        idle.close()


def test_a_worker_killed_from_outside_is_an_infra_error_for_every_session_on_it():
    with _hold_server(request_timeout_s=10.0) as srv:
        pid = srv.manager._procs.workers[0].proc.pid
        threading.Timer(0.8, os.kill, (pid, signal.SIGKILL)).start()
        res = _play_concurrently(srv, {"a": ("<sleep>3</sleep>", 0.0), "b": ("<sleep>3</sleep>", 0.1)})
    for step in res.values():
        assert "killed from outside the server" in _infra(step)


def test_a_step_that_takes_its_worker_over_the_memory_limit_is_that_agents_failure():
    with _hold_server(request_timeout_s=10.0, worker_memory_mb=400) as srv:
        res = _play_concurrently(srv, {"hog": ("<alloc>900</alloc>", 0.3), "busy": ("<sleep>2</sleep>", 0.0)})
    assert _agent_failure(res["hog"], "memory_limit"), res["hog"][4]
    assert "memory limit" in _infra(res["busy"])


# ------------------------------------------------------------------------------- the token's secrecy
_PEEK = """
import sys
from turngym.server.client import RemoteEnv
from turngym.server.serve import read_token
from turngym.server.testing import GilHoldingTestEnv, ServerThread

token = read_token()  # from $TURNGYM_TOKEN, as an operator passes it
with ServerThread(factories={"turngym/Math-v0": GilHoldingTestEnv}, processes=1, token=token) as srv:
    env = RemoteEnv(srv.url, "turngym/Math-v0", token=token)
    env.reset(seed=0)
    print(env.step("<peek>" + sys.stdin.read().strip() + "</peek>")[0])
    env.close()
"""


def test_env_workers_cannot_read_the_servers_token():
    # a fresh process (so a fresh forkserver), started with the token in its environment
    env = {**os.environ, "TURNGYM_TOKEN": TOKEN, "PYTHONPATH": _ROOT}
    out = subprocess.run([sys.executable, "-c", _PEEK], input=TOKEN, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # not in the worker's own, the forkserver's or the server's environment or command line
    assert out.stdout.strip().splitlines()[-1] == "<found></found>", out.stdout


def _descendants(root: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parents[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
    found, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parents.items() if pp in frontier]
        found += frontier
    return found


def _visible_in(pids: list[int], needle: bytes) -> list[str]:
    seen = []
    for pid in pids:
        for name in ("environ", "cmdline"):
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    if needle in f.read():
                        seen.append(f"{pid}/{name}")
    return seen


@pytest.mark.parametrize("how", ["env", pytest.param("file", marks=pytest.mark.slow), pytest.param("flag", marks=pytest.mark.slow)])
def test_turngym_serve_keeps_its_token_out_of_ps_and_every_processes_environment(how, tmp_path):
    port = _free_port()
    secret = f"tok-{how}-{os.getpid()}-{time.monotonic_ns()}"
    args = [sys.executable, "-m", "turngym.cli", "serve", MATH, "--port", str(port), "--processes", "2"]
    env = {**{k: v for k, v in os.environ.items() if k != "TURNGYM_TOKEN"}, "PYTHONPATH": _ROOT}
    if how == "env":
        env["TURNGYM_TOKEN"] = secret
    elif how == "file":
        (tmp_path / "token").write_text(secret + "\n")
        args += ["--token-file", str(tmp_path / "token")]
    else:
        args += ["--token", secret]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_healthy(port, proc)
        pids = _descendants(proc.pid)
        assert len(pids) >= 4, pids  # the server, the forkserver, two env workers
        assert _visible_in(pids, secret.encode()) == []
        with pytest.raises(ConfigError, match="requires a token"):
            RemoteEnv(f"ws://127.0.0.1:{port}", MATH, retries=0)
        remote = RemoteEnv(f"ws://127.0.0.1:{port}", MATH, token=secret)
        remote.reset(seed=0)
        assert remote.step("<calc>2+2</calc>")[0] == "<result>4</result>"
        remote.close()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert ("shows in `ps`" in err) == (how == "flag"), err


def _free_port() -> int:
    from turngym.server.testing import free_port

    return free_port()


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError("the server did not start")


# --------------------------------------------------------------------- scripts without a main guard
_UNGUARDED = '''
import sys
import turngym.server
turngym.server.serve(["turngym/Math-v0"], port=int(sys.argv[1]), processes=2)
'''

_UNGUARDED_OWN_ENV = '''
import sys, time
from turngym.envs.math.env import MathEnv
from turngym.server.testing import ServerThread

class MyEnv(MathEnv):
    pass

with ServerThread(factories={"turngym/Math-v0": MyEnv}, processes=1):
    time.sleep(60)
'''


def test_a_script_without_a_main_guard_serves_registry_envs(tmp_path):
    script = tmp_path / "serve_math.py"
    script.write_text(_UNGUARDED)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": _ROOT})
    try:
        _wait_healthy(port, proc)
        remote = RemoteEnv(f"ws://127.0.0.1:{port}", MATH)
        remote.reset(seed=0)
        assert remote.step("<calc>2+2</calc>")[0] == "<result>4</result>"
        remote.close()
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()["workers_alive"] == 2
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_a_script_without_a_main_guard_whose_env_lives_in_it_fails_fast_naming_the_fix(tmp_path):
    script = tmp_path / "serve_own.py"
    script.write_text(_UNGUARDED_OWN_ENV)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": _ROOT})
    assert proc.returncode != 0 and time.monotonic() - t0 < 60
    assert 'if __name__ == "__main__":' in proc.stderr.splitlines()[-1], proc.stderr[-2000:]
