"""MCP env latency: server start, reset and step of ``turngym/MCP-SQLite-v0``, and what they cost.

    python benchmarks/bench_mcp.py             # table
    python benchmarks/bench_mcp.py --json      # machine-readable
    python benchmarks/bench_mcp.py -n 200 --starts 5

Rows (p50 / p95 over ``n`` samples, round-robin so load changes on a shared machine hit all alike):
  start (sandboxed)     a fresh server: bubblewrap + interpreter + ``initialize`` + ``tools/list``
                        (``restart_each_episode=True`` pays this on every reset)
  reset (shared)        ``env.reset`` on the process's running server (the default)
  step: write           an oracle ``write_query`` message: world written to the server's file,
                        the call, the file read back, the grader's view and signals
  step: read            a ``read_query`` message (the same path; the world is unchanged)
  step: invalid         a call the env refuses before the server (parsing + schema only)
  raw call (sandboxed)  ``MCPClient.call`` on the sandboxed server, no env around it
  raw call (bare)       the same on an unsandboxed server process: what the sandbox costs per call
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import turngym
from turngym.envs.mcp.client import MCPClient
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
        "start (sandboxed)", "reset (shared)", "step: write", "step: read", "step: invalid",
        "raw call (sandboxed)", "raw call (bare)")}
    private = MCPSQLiteEnv(restart_each_episode=True)
    for i in range(starts):
        t = time.perf_counter()
        private.reset(seed=i)
        samples["start (sandboxed)"].append(time.perf_counter() - t)
    private.close()

    env = turngym.make(ENV_ID)
    env.reset(seed=0)  # starts the shared server
    tmp = tempfile.mkdtemp(prefix="bench-mcp-")
    errlog = open(os.path.join(tmp, "stderr.log"), "w")  # noqa: SIM115
    bare = MCPClient(sys.executable, ["-c", SERVER_MAIN, "--db-path", os.path.join(tmp, "w.db")], errlog=errlog)
    bare.start()
    write_tasks = [t for t in (generate_sqlite_task(s) for s in range(10 * n)) if t.writes][:n]
    for k in range(n):
        t = time.perf_counter()
        env.reset(options={"task": write_tasks[k]})
        samples["reset (shared)"].append(time.perf_counter() - t)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=100, help="samples per row (episodes)")
    ap.add_argument("--starts", type=int, default=3, help="fresh server starts to time")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    rows = bench(args.n, args.starts)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'row':<22}{'p50 ms':>10}{'p95 ms':>10}{'n':>6}")
    for name, r in rows.items():
        print(f"{name:<22}{r['p50_ms']:>10.1f}{r['p95_ms']:>10.1f}{r['n']:>6}")


if __name__ == "__main__":
    main()
