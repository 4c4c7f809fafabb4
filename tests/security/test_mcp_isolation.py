"""A hostile MCP episode cannot stall another env, and leaves no file behind (issue 38, item 2).

The attacks: an endless recursive CTE held a bystander env's ``list_tables`` for 11.8 s (the
shared server's lock covered every call of a message, each up to two deadlines plus a restart);
``VACUUM INTO '/tmp/x'`` persisted in the long-lived server's ``/tmp``, a channel to later episodes.
Now every env has its own server, the deadline is kept inside the server's work (SQLite's
progress handler), and a server whose scratch dirs hold a file after a call is replaced.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

import turngym
from turngym.envs.mcp.env import close_shared_servers
from turngym.sandbox.watchdog import tree_pids

pytest.importorskip("mcp_server_sqlite")

ENV_ID = "turngym/MCP-SQLite-v0"
ENDLESS = "SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c)"


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def _bystander_under_attack(hostile, bystander, seconds: float) -> tuple[list[float], int]:
    """Step ``bystander`` (``list_tables``) while ``hostile`` sends endless queries, 4 per message."""
    stop = threading.Event()
    hostile_steps = [0]

    def attack():
        while not stop.is_set():
            _, _, term, trunc, _ = hostile.step(json.dumps([{"name": "read_query", "arguments": {"query": ENDLESS}}] * 4))
            hostile_steps[0] += 1
            if term or trunc:
                hostile.reset(seed=hostile_steps[0])

    t = threading.Thread(target=attack, daemon=True)
    t.start()
    time.sleep(0.3)  # the first endless query is running
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        obs, _, term, trunc, info = bystander.step(call("list_tables"))
        times.append(time.perf_counter() - t0)
        assert "employees" in obs and info["infra_error"] is None
        if term or trunc:
            bystander.reset(seed=len(times))
    stop.set()
    t.join(timeout=30)
    return times, hostile_steps[0]


def test_a_hostile_neighbour_does_not_stall_a_bystander():
    hostile = turngym.make(ENV_ID, call_timeout_s=2.0)
    bystander = turngym.make(ENV_ID)
    try:
        hostile.reset(seed=1)
        bystander.reset(seed=2)
        times, _ = _bystander_under_attack(hostile, bystander, 3.0)
        # Before: a bystander call waited for the whole hostile message (4 x up to 2 deadlines).
        # Now no lock is shared: generous for a loaded 2-core CI machine, far below one deadline.
        assert len(times) >= 5 and max(times) < 1.0, times
    finally:
        hostile.close()
        bystander.close()


def test_a_shared_server_delays_a_neighbour_by_one_call_at_most():
    hostile = turngym.make(ENV_ID, call_timeout_s=1.0, share_server=True)
    bystander = turngym.make(ENV_ID, call_timeout_s=1.0, share_server=True)
    try:
        hostile.reset(seed=1)
        bystander.reset(seed=2)
        assert hostile.unwrapped._server is bystander.unwrapped._server
        times, hostile_steps = _bystander_under_attack(hostile, bystander, 3.0)
        # at most one hostile call (interrupted inside the server at 0.8 s, within its 1 s deadline)
        # ahead of each bystander call (a fair lock, taken per call): never the hostile's whole
        # message of 4 calls, nor several of its calls in a row
        assert max(times) < 1.0 + 0.5, times
    finally:
        hostile.close()
        bystander.close()
        close_shared_servers()


def _scratch_files(env) -> list[str]:
    """Files in the /tmp and /dev/shm of the env's server, read independently of the env's check."""
    server = env.unwrapped._server.server
    found = []
    own = os.readlink("/proc/self/ns/mnt")
    for p in tree_pids(server._pid()):
        try:
            if os.readlink(f"/proc/{p}/ns/mnt") != own:
                found += [f"{d}/{n}" for d in ("/tmp", "/dev/shm") for n in os.listdir(f"/proc/{p}/root{d}")]
        except OSError:
            continue
    return sorted(set(found))


def test_no_file_outlives_its_episode_outside_the_database():
    env = turngym.make(ENV_ID)
    try:
        replies = []
        for _ in range(2):
            env.reset(seed=3)
            obs, *_ = env.step(call("write_query", query="VACUUM INTO '/tmp/x.db'"))
            replies.append(obs)
            assert _scratch_files(env) == []
        # The second episode's VACUUM INTO the same path succeeds: nothing was left to collide with
        # (with the file still there SQLite answers "output file already exists").
        assert replies[0] == replies[1] and "already exists" not in replies[1]
        env.reset(seed=3)
        assert "employees" in env.step(call("list_tables"))[0]
    finally:
        env.close()
