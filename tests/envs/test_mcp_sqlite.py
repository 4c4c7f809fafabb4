"""turngym/MCP-SQLite-v0 against the real mcp-server-sqlite (the mcp extra + bubblewrap)."""

import contextlib
import json
import os
import signal
import sqlite3
import sys
import threading
import time

import numpy as np
import pytest

import turngym
from turngym.agents import OracleAgent, RandomAgent
from turngym.envs.mcp.env import close_shared_servers
from turngym.envs.mcp.server import SERVER_LIMITS, MCPServer
from turngym.envs.mcp.sqlite_env import MCPSQLiteEnv
from turngym.envs.mcp.sqlite_tasks import build_database, generate_sqlite_task, sqlite_task_from_id
from turngym.envs.mcp.sqlite_world import diff_count, progress, read_world
from turngym.rollout import run_episodes
from turngym.sandbox.watchdog import tree_pids

ENV_ID = "turngym/MCP-SQLite-v0"


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def play(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
        if out[-1][2] or out[-1][3]:
            break
    return out


def play_oracle(env):
    out = []
    while not out or not (out[-1][2] or out[-1][3]):
        out.append(env.step(env.oracle_action()))
    return out


@pytest.fixture(scope="module")
def env():
    e = turngym.make(ENV_ID)
    yield e
    e.close()


# -- tasks and the grader's view (no server) -------------------------------------------------
def test_tasks_are_seeded_and_ask_for_something():
    kinds = set()
    for seed in range(60):
        t = generate_sqlite_task(seed)
        assert t == sqlite_task_from_id(t.id)
        assert t.writes or t.answers
        initial = read_world(build_database(t.setup))
        goal = read_world(build_database((*t.setup, *t.writes)))
        assert (initial.key != goal.key) == bool(t.writes)  # every change changes something
        kinds.add((bool(t.writes), bool(t.answers)))
    assert kinds == {(True, False), (False, True), (True, True)}


def test_world_view_is_canonical_and_diffed_as_multisets():
    a = build_database(("CREATE TABLE t(x, y)", "INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')"))
    b = build_database(("CREATE TABLE t(x, y)", "INSERT INTO t VALUES (2, 'b')", "INSERT INTO t VALUES (1, 'a')"))
    assert a != b and read_world(a).key == read_world(b).key  # row order is not state
    c = build_database(("CREATE TABLE t(x, y)", "INSERT INTO t VALUES (2, 'b')", "INSERT INTO t VALUES (3, 'c')"))
    wa, wc = read_world(a), read_world(c)
    assert diff_count(wa, wc) == 2
    assert progress(wc, wa, wc) == 1.0 and progress(wa, wa, wc) == 0.0
    # an index changes no row, but the world is not the goal's
    d = build_database(("CREATE TABLE t(x, y)", "INSERT INTO t VALUES (2, 'b')", "INSERT INTO t VALUES (3, 'c')",
                        "CREATE INDEX i ON t(x)"))
    assert progress(read_world(d), wa, wc) < 1.0


def test_grader_reads_hostile_databases_bounded():
    assert read_world(b"garbage" * 100).error
    # a generated column that builds a 50 MB blob on every read: refused by the grader's length limit
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t(a INTEGER, b BLOB GENERATED ALWAYS AS (zeroblob(a)) VIRTUAL)")
    con.execute("INSERT INTO t(a) VALUES (5)")
    con.execute("PRAGMA writable_schema = ON")  # a file is bytes: anything SQLite can load may arrive
    con.execute("UPDATE sqlite_master SET sql = replace(sql, 'zeroblob(a)', 'zeroblob(a * 10000000)')")
    con.commit()
    w = read_world(con.serialize())
    assert w.error is not None and w.tables == {}


# -- the env on the real server --------------------------------------------------------------
def test_oracle_solves_and_random_fails():
    seeds = list(range(6))
    oracle = run_episodes(lambda: turngym.make(ENV_ID), OracleAgent(), seeds, env_id=ENV_ID)
    assert [ep.outcome["reward"] for ep in oracle] == [1.0] * len(seeds)
    random = run_episodes(lambda: turngym.make(ENV_ID), RandomAgent(seed=1), seeds, env_id=ENV_ID)
    assert np.mean([ep.success for ep in random]) <= 0.1
    assert all(ep.infra_error is None for ep in oracle + random)


def test_bad_sql_is_the_agents_failure_not_infra(env):
    env.reset(seed=3)
    obs, reward, term, trunc, info = env.step(call("read_query", query="SELECT * FROM no_such_table"))
    assert info["action_valid"] and info["infra_error"] is None and not term
    assert "no such table" in obs
    assert info["signals"]["exec_ok"] == 0.0 and info["signals"]["unneeded_call"] == 1.0


def test_invalid_and_forbidden_calls(env):
    env.reset(seed=3)
    *_, info = env.step(call("append_insight", insight="x"))  # offered by the server, not by the env
    assert not info["action_valid"] and info["signals"]["forbidden_action"] == 1.0
    *_, info = env.step(call("read_query", sql="SELECT 1"))  # breaks the tool's JSON schema
    assert not info["action_valid"] and "query" in info["invalid_reason"]
    *_, info = env.step(call("drop_everything"))
    assert not info["action_valid"] and info["signals"]["forbidden_action"] == 0.0
    key = info["state_key"]
    obs, _, _, _, info = env.step(call("create_table", query="CREATE TABLE notes (x TEXT)"))
    assert info["action_valid"] and info["signals"]["forbidden_action"] == 1.0 and info["state_key"] != key
    *_, info = env.step("All done.")
    assert info["signals"]["state_match"] == 0.0 and info["outcome"]["reward"] == 0.0


def test_signals_follow_the_database(env):
    task = next(generate_sqlite_task(s) for s in range(100) if len(generate_sqlite_task(s).writes) == 2)
    obs, info = env.reset(options={"task": task})
    key0 = info["state_key"]
    steps = play(env, [env.oracle_action()])
    assert 0.0 < steps[-1][4]["signals"]["progress"] < 1.0 and steps[-1][4]["state_key"] != key0
    # the same read twice on the same database: the second learns nothing
    read = call("read_query", query="SELECT * FROM employees")
    assert play(env, [read])[-1][4]["signals"]["unneeded_call"] == 0.0
    assert play(env, [read])[-1][4]["signals"]["unneeded_call"] == 1.0
    steps = play_oracle(env)
    assert steps[0][4]["signals"]["progress"] == 1.0
    assert steps[-1][2] and steps[-1][4]["outcome"]["success"]


def test_snapshots_move_between_envs_sharing_one_server():
    env, other = turngym.make(ENV_ID, share_server=True), turngym.make(ENV_ID, share_server=True)
    try:
        task = next(generate_sqlite_task(s) for s in range(100) if generate_sqlite_task(s).writes)
        env.reset(options={"task": task})
        other.reset(options={"task": task})
        env.step(env.oracle_action())
        snap = env.snapshot()
        dump = json.dumps([{"name": "read_query", "arguments": {"query": f"SELECT * FROM {t}"}}
                           for t in ("departments", "employees", "projects")])
        assert other._server is env._server  # one server process, two databases
        changed = env.step(dump)[0]
        untouched = other.step(dump)[0]
        assert changed != untouched
        other.restore(snap)
        assert other.state_key() == env.state_key()
        assert other.step(dump)[0] == changed
        a, b = play_oracle(env), play_oracle(other)
        assert [(s[0], s[1], s[4]["state_key"]) for s in a] == [(s[0], s[1], s[4]["state_key"]) for s in b]
        assert a[-1][4]["outcome"]["success"]
    finally:
        other.close()
        env.close()
        close_shared_servers()


def test_files_an_episode_leaves_beside_the_world_do_not_reach_the_next(env):
    # ATTACH / VACUUM INTO write other files into the shared server's working dir while the
    # world file stays as it was: the next episode (same bytes, so no rewrite) must not see them
    # (another agent's junk could fill the disk quota and fail this one's writes).
    junk = call("write_query", query="VACUUM INTO 'junk.db'")
    outs = []
    for _ in range(2):
        env.reset(seed=5)
        outs.append([(s[0], s[4]["signals"]) for s in play(env, [junk, junk])])
    assert outs[0] == outs[1]  # same seed, same actions: same episode
    # Not even the next call sees it: the world (what snapshots carry) is the one file.
    assert [sig["exec_ok"] for _, sig in outs[0]] == [1.0, 1.0]


def test_server_is_sandboxed(env, tmp_path):
    env.reset(seed=1)
    target = tmp_path / "escaped.db"
    os.chmod(tmp_path, 0o777)
    obs, *_, info = env.step(call("write_query", query=f"ATTACH DATABASE '{target}' AS e"))
    assert "unable to open" in obs and not target.exists()
    assert info["infra_error"] is None


def _kill_sandbox(pid):
    """SIGKILL a sandbox and everything in it, and wait until none of it runs (no race with a
    call already on its way: the server is dead before the next step)."""
    pids = [pid, *tree_pids(pid)]
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = []
        for p in pids:
            try:
                with open(f"/proc/{p}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.append(p)
            except OSError:
                pass
        if not alive:
            return
        time.sleep(0.01)
    raise AssertionError(f"the sandbox {pid} did not die")


#: A server that cannot start (an infrastructure fault), swapped in for the next restart.
BROKEN = MCPServer(command=(sys.executable, "-S", "-c", "raise SystemExit('the server is broken')"))


def _sandboxes():
    """Our child processes that are bubblewrap sandboxes (each MCP server runs in one)."""
    me, out = str(os.getpid()), set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = fh.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if ppid == me and b"bwrap" in cmd:
            out.add(int(pid))
    return out


def test_blame_dead_server_hung_call_unstartable_server():
    """One private server through the three failures (one test: each restart costs a start)."""
    env = MCPSQLiteEnv(restart_each_episode=True, call_timeout_s=1.0)
    try:
        others = _sandboxes()
        env.reset(seed=4)
        starts = env._server.server.starts
        # 1. the server is killed between calls: seen dead, restarted before the call, nobody's fault
        _kill_sandbox(*(_sandboxes() - others))
        obs, reward, term, trunc, info = env.step(call("list_tables"))
        assert info["infra_error"] is None and "employees" in obs and env._server.server.starts == starts + 1
        # 1b. the server is killed *during* a (slow) write: restarted on the world as it was
        # before the call, the call retried; the agent sees one clean result, applied once
        salaries = call("read_query", query="SELECT id, salary FROM employees ORDER BY id")
        env.call_timeout_s = 30.0  # the server restarts knowing the new deadline (before this read)
        before = env.step(salaries)[0]
        # ~2 s in SQLite at idle: the killer (at 0.2 s) must land mid-call on a fast machine too (1M rows took 0.18 s)
        slow = ("UPDATE employees SET salary = salary + 1 WHERE (SELECT count(*) FROM (WITH RECURSIVE c(x) AS "
                "(SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000) SELECT x FROM c)) > 0")
        (pid,) = _sandboxes() - others
        killer = threading.Timer(0.2, _kill_sandbox, (pid,))
        killer.start()
        obs, reward, term, trunc, info = env.step(call("write_query", query=slow))
        killer.join()
        assert info["infra_error"] is None and info["signals"]["exec_ok"] == 1.0 and env.recovered_calls == 1
        env.call_timeout_s = 1.0
        after = env.step(salaries)[0]
        assert after != before and after.count("salary") == before.count("salary")
        bumped = json.loads(json.loads(after.split("\n")[1])["content"].replace("'", '"'))
        base = json.loads(json.loads(before.split("\n")[1])["content"].replace("'", '"'))
        assert [r["salary"] for r in bumped] == [r["salary"] + 1 for r in base]
        # 2. a query that never ends is interrupted inside the server at the call's deadline: the
        # agent's failed call, answered in time, with no restart
        starts = env._server.server.starts
        endless = "SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c)"
        t0 = time.monotonic()
        obs, reward, term, trunc, info = env.step(call("read_query", query=endless))
        assert time.monotonic() - t0 < env.call_timeout_s + 0.5
        assert info["infra_error"] is None and info["action_valid"] and "interrupted" in obs
        assert info["signals"]["exec_ok"] == 0.0 and not term and env._server.server.starts == starts
        # 2b. a server that stops answering (SIGSTOP) is killed at the deadline and the call retried
        (pid,) = _sandboxes() - others
        for p in tree_pids(pid):
            os.kill(p, signal.SIGSTOP)
        obs, reward, term, trunc, info = env.step(call("list_tables"))
        assert info["infra_error"] is None and "employees" in obs and env.recovered_calls == 2
        # 3. the server dies and cannot be started again: the infrastructure's failure
        env._server.server.spec = BROKEN
        _kill_sandbox(*(_sandboxes() - others))
        obs, reward, term, trunc, info = env.step(call("list_tables"))
        assert info["infra_error"] and "broken" in info["infra_error"]
        assert term and info["outcome"]["reason"] == "infra_error" and reward == 0.0
        with pytest.raises(turngym.core.errors.InfraError):
            env.reset(seed=2)  # a private server is restarted per episode: it cannot start now
    finally:
        env.close()


def test_a_forked_child_starts_its_own_server(env):
    env.reset(seed=5)
    parent_server = env._server
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the inherited env must not drive (or kill) the parent's server
        try:
            os.close(r)
            env.reset(seed=5)
            obs, *_, info = env.step(call("list_tables"))
            ok = env._server is not parent_server and "employees" in obs and info["infra_error"] is None
            os.write(w, b"1" if ok else b"0")
            close_shared_servers()
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        assert fh.read() == b"1"
    os.waitpid(pid, 0)
    obs, *_ = env.step(call("list_tables"))  # the parent's server is untouched
    assert "employees" in obs and env._server is parent_server


def test_limits_argument_bounds_the_server_sandbox():
    """``limits=`` (the argument Code and SWE envs take) replaces the server spec's limits."""
    lim = SERVER_LIMITS.replace(memory_mb=768, processes=24, cpu_cores=0.5)
    others = _sandboxes()
    env = MCPSQLiteEnv(limits=lim)
    try:
        env.reset(seed=2)
        obs, *_, info = env.step(call("list_tables"))
        assert info["infra_error"] is None and "employees" in obs
        assert env._server.server.limits == lim
        (pid,) = _sandboxes() - others
        nproc = set()
        for p in tree_pids(pid):
            with contextlib.suppress(OSError), open(f"/proc/{p}/limits") as fh:
                nproc |= {line.split()[2] for line in fh if line.startswith("Max processes")}
        assert "24" in nproc  # the server's processes run under the env's bound, not the spec's 32
    finally:
        env.close()
