"""MCP env latency: server start, reset and step of ``turngym/MCP-SQLite-v0``, and what they cost.

    python benchmarks/bench_mcp.py             # table
    python benchmarks/bench_mcp.py --json      # machine-readable
    python benchmarks/bench_mcp.py -n 200 --starts 5

Rows (p50 / p95 over ``n`` samples, round-robin so load changes on a shared machine hit all alike):
  start (sandboxed)     a fresh server: bubblewrap + interpreter + ``initialize`` + ``tools/list``
                        (``restart_each_episode=True`` pays this on every reset)
  reset                 ``env.reset`` on the env's running server (the default)
  step: write           an oracle ``write_query`` message: world written to the server's file,
                        the call, the file read back, the grader's view and signals
  step: read            a ``read_query`` message (the same path; the world is unchanged)
  step: invalid         a call the env refuses before the server (parsing + schema only)
  raw call (sandboxed)  ``MCPClient.call`` on the sandboxed server, no env around it
  raw call (bare)       the same on an unsandboxed server process: what the sandbox costs per call

Bystander rows (``--bystander-s`` seconds each; p50 / p95 / p99): a ``list_tables`` step of one env
while another env of the process sends endless recursive CTEs (4 per message, ``call_timeout_s=2``):
  bystander: alone          no neighbour (the baseline)
  bystander: hostile (own)  the default: every env has its own server; target p99 <= 100 ms
  bystander: hostile (shared)  ``share_server=True``: a neighbour's call (interrupted inside the
                            server at 0.8 x its deadline) can be ahead of each bystander call

Figures (2 shared, loaded cores, -n 30 --bystander-s 20): bystander alone p50 7.6 / p99 42.5 ms;
hostile neighbour, own servers 12.8 / 60.9 ms (target p99 <= 100 ms); shared 1631 / 1973 ms (one
hostile call of 1.6 s ahead). Before (one shared server, a lock over each whole message): 11.8 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import turngym
from turngym.envs.mcp.client import MCPClient
from turngym.envs.mcp.env import close_shared_servers
from turngym.envs.mcp.sqlite_env import SERVER_MAIN, MCPSQLiteEnv
from turngym.envs.mcp.sqlite_tasks import generate_sqlite_task

ENV_ID = "turngym/MCP-SQLite-v0"
READ = json.dumps({"name": "read_query", "arguments": {"query": "SELECT * FROM employees"}})
INVALID = json.dumps({"name": "read_query", "arguments": {"sql": "SELECT 1"}})


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def bench(n: int, starts: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[float]] = {k: [] for k in (
        "start (sandboxed)", "reset", "step: write", "step: read", "step: invalid",
        "raw call (sandboxed)", "raw call (bare)")}
    private = MCPSQLiteEnv(restart_each_episode=True)
    for i in range(starts):
        t = time.perf_counter()
        private.reset(seed=i)
        samples["start (sandboxed)"].append(time.perf_counter() - t)
    private.close()

    env = turngym.make(ENV_ID)
    env.reset(seed=0)  # starts the env's server
    tmp = tempfile.mkdtemp(prefix="bench-mcp-")
    errlog = open(os.path.join(tmp, "stderr.log"), "w")  # noqa: SIM115
    bare = MCPClient(sys.executable, ["-c", SERVER_MAIN, "--db-path", os.path.join(tmp, "w.db")], errlog=errlog)
    bare.start()
    write_tasks = [t for t in (generate_sqlite_task(s) for s in range(10 * n)) if t.writes][:n]
    for k in range(n):
        t = time.perf_counter()
        env.reset(options={"task": write_tasks[k]})
        samples["reset"].append(time.perf_counter() - t)
        for name, action in (("step: write", env.oracle_action()), ("step: read", READ), ("step: invalid", INVALID)):
            t = time.perf_counter()
            env.step(action)
            samples[name].append(time.perf_counter() - t)
        client = env._server.server.client
        t = time.perf_counter()
        client.call("read_query", {"query": "SELECT * FROM employees"}, 5.0)
        samples["raw call (sandboxed)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        bare.call("list_tables", {}, 5.0)
        samples["raw call (bare)"].append(time.perf_counter() - t)
    bare.close()
    errlog.close()
    env.close()
    return {k: {"p50_ms": 1e3 * _pct(v, 0.5), "p95_ms": 1e3 * _pct(v, 0.95), "n": len(v)} for k, v in samples.items()}


ENDLESS = "SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c)"
LIST = json.dumps({"name": "list_tables", "arguments": {}})


def _bystander(seconds: float, hostile_mode: str | None) -> list[float]:
    """Step times of a bystander env for ``seconds``, beside a hostile env (or none)."""
    share = hostile_mode == "shared"
    bystander = turngym.make(ENV_ID, call_timeout_s=2.0, share_server=share)
    hostile = turngym.make(ENV_ID, call_timeout_s=2.0, share_server=share) if hostile_mode else None
    stop = threading.Event()

    def attack() -> None:
        assert hostile is not None
        k = 0
        while not stop.is_set():
            *_, term, trunc, _ = hostile.step(json.dumps([json.loads(READ.replace("SELECT * FROM employees", ENDLESS))] * 4))
            if term or trunc:
                k += 1
                hostile.reset(seed=k)

    bystander.reset(seed=0)
    thread = None
    if hostile is not None:
        hostile.reset(seed=1)
        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        time.sleep(0.5)
    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        *_, term, trunc, _ = bystander.step(LIST)
        times.append(time.perf_counter() - t)
        if term or trunc:
            bystander.reset(seed=len(times))
    stop.set()
    if thread is not None:
        thread.join(timeout=30)
    for e in (bystander, hostile):
        if e is not None:
            e.close()
    close_shared_servers()
    return times


def bench_bystander(seconds: float) -> dict[str, dict[str, float]]:
    rows = {}
    for name, mode in (("bystander: alone", None), ("bystander: hostile (own)", "own"),
                       ("bystander: hostile (shared)", "shared")):
        v = _bystander(seconds, mode)
        rows[name] = {"p50_ms": 1e3 * _pct(v, 0.5), "p95_ms": 1e3 * _pct(v, 0.95), "p99_ms": 1e3 * _pct(v, 0.99),
                      "n": len(v)}
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=100, help="samples per row (episodes)")
    ap.add_argument("--starts", type=int, default=3, help="fresh server starts to time")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--bystander-s", type=float, default=20.0, help="seconds per bystander row (0: skip them)")
    args = ap.parse_args()
    rows = bench(args.n, args.starts) if args.n > 0 else {}
    if args.bystander_s > 0:
        rows.update(bench_bystander(args.bystander_s))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'row':<30}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'n':>6}")
    for name, r in rows.items():
        p99 = f"{r['p99_ms']:>10.1f}" if "p99_ms" in r else f"{'':>10}"
        print(f"{name:<30}{r['p50_ms']:>10.1f}{r['p95_ms']:>10.1f}{p99}{r['n']:>6}")


if __name__ == "__main__":
    main()
