"""Load benchmark of the env server on loopback, reported in OpenEnv's scaling format.

Starts ``turngym serve`` in a subprocess on 127.0.0.1, then, for each concurrency level N,
opens N sessions at once with :class:`~turngym.server.client.AsyncRemoteEnv` (one event loop,
one process), resets each and plays ``--steps`` calculator/answer turns per session, resetting
when an episode ends. A session *succeeds* if it connected and every request was answered.
Reported per level: success rate, connect P50, step latency P50/P99 and steady steps/s (between
the 10th and 90th percentile completion times); then the
OpenEnv-style summary row: the largest N with >= 95% success (``max batch``), cores,
batch/core, P99 and requests/s at that N.

Bounded: levels stop at ``--max-sessions`` or when ``--time-budget`` seconds are spent or
success drops below 95%; every request has a timeout; traffic goes to 127.0.0.1 only.

``--attack`` measures the server's health latency while hostile actions run (each one
alone, then several at once): ``<answer>10**10**10</answer>`` and ``"<calc>" * 40000`` on
Math-v0, health polled every 50 ms from this process; reported as p50/max per attack and
how each step was answered (normal turn, ``step_timeout``, ``worker_crash``, infra error).
The ``blame_*`` rows put an innocent step and a hostile one (a GIL hog, a segfault) on one
shared worker: the hostile one should be its agent's failure, the innocent one ``infra_error``.

``--compare A B`` runs the whole benchmark once per executor (e.g. ``auto process``: envs on
the event loop or threads vs. envs in killable worker processes, the default) and reports
the steps/s ratio B/A, so the cost of isolation is measured on one machine in one run. The
server's CPU time includes its worker processes.

    python benchmarks/bench_server.py                      # math env, default levels
    python benchmarks/bench_server.py --env turngym/Math-v0 --levels 100 1000 2000 --json
    python benchmarks/bench_server.py --env turngym/Math-v0 --levels 100 500 --compare auto process
    python benchmarks/bench_server.py --attack --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from turngym.server.client import AsyncRemoteEnv  # noqa: E402
from turngym.server.testing import free_port  # noqa: E402

EXECUTORS = ("process", "auto", "thread", "inline")

# Actions by family: cheap, valid turns that exercise parsing, the verifier and signals
# (other families play actions sampled from their own grammar).
ACTIONS = {
    "math": ["<calc>12 * 7 - 5</calc>", "<calc>(3 + 4) ** 2</calc>", "<answer>42</answer>"],
    "shop": ["search[red shoes]", "click[1]", "click[buy now]"],
}


@dataclass
class Level:
    mode: str
    sessions: int
    ok_sessions: int
    success: float
    steps: int
    wall_s: float
    steps_per_s: float
    connect_p50_ms: float
    step_p50_ms: float
    step_p99_ms: float
    server_cpu_us_per_step: float = float("nan")  # connects and resets included


def _stat(pid: int) -> list[str]:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its live descendants (env worker processes), Linux /proc."""
    try:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    children.setdefault(int(_stat(int(entry))[1]), []).append(int(entry))
                except (OSError, IndexError, ValueError):
                    continue
        total, todo = 0.0, [pid]
        while todo:
            p = todo.pop()
            try:
                fields = _stat(p)
            except (OSError, IndexError):
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            todo.extend(children.get(p, ()))
        return total
    except (OSError, IndexError, ValueError):
        return float("nan")


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _steady_rate(stamps: list[float]) -> float:
    """Steps/s between the 10th and 90th percentile completion times: the ramp-up and the
    last stragglers say nothing about what the server sustains."""
    if len(stamps) < 10:
        return 0.0
    xs = sorted(stamps)
    a, b = xs[len(xs) // 10], xs[(9 * len(xs)) // 10]
    return (0.8 * len(xs)) / (b - a) if b > a else 0.0


async def _session(url: str, env_id: str, seed: int, steps: int, actions: list[str], lat: list[float], stamps: list[float],
                   connect_lat: list[float], go: asyncio.Event, timeout: float, think_s: float) -> int:
    env = AsyncRemoteEnv(url, env_id, retries=0, connect_timeout=timeout, request_timeout=timeout)
    t0 = time.perf_counter()
    try:
        await env.connect()
        connect_lat.append(time.perf_counter() - t0)
        await env.reset(seed=seed)
        await go.wait()  # every session steps at once: the measured phase is pure concurrency
        rng = random.Random(seed)
        done = 0
        for k in range(steps):
            if think_s:  # the agent "thinks" (an LLM generating): jittered so sessions do not beat in sync
                await asyncio.sleep(rng.uniform(0, 2 * think_s))
            t = time.perf_counter()
            *_, term, trunc, info = await env.step(actions[k % len(actions)])
            if info["infra_error"]:
                return -1
            now = time.perf_counter()
            lat.append(now - t)
            stamps.append(now)
            done += 1
            if term or trunc:
                await env.reset(seed=seed + k + 1)
        return done
    except Exception:  # a refused or dropped session: counted as a failure, not raised
        return -1
    finally:
        await env.close()


async def run_level(url: str, env_id: str, n: int, steps: int, actions: list[str], timeout: float,
                    think_s: float = 0.0) -> Level:
    lat: list[float] = []
    stamps: list[float] = []
    connect_lat: list[float] = []
    go = asyncio.Event()
    tasks = [asyncio.ensure_future(_session(url, env_id, i, steps, actions, lat, stamps, connect_lat, go, timeout, think_s))
             for i in range(n)]
    # wait until every session is connected and reset (or failed), then release them together
    deadline = time.perf_counter() + timeout
    while len(connect_lat) + sum(t.done() for t in tasks) < n and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    t0 = time.perf_counter()
    go.set()
    results = await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    ok = sum(1 for r in results if r == steps)
    return Level(
        mode=f"paced (think {think_s * 1e3:.0f} ms)" if think_s else "saturation",
        sessions=n, ok_sessions=ok, success=ok / n, steps=len(lat), wall_s=wall,
        steps_per_s=_steady_rate(stamps),
        connect_p50_ms=_pct(connect_lat, 0.5) * 1e3, step_p50_ms=_pct(lat, 0.5) * 1e3, step_p99_ms=_pct(lat, 0.99) * 1e3,
    )


def start_server(env_id: str, port: int, max_sessions: int, executor: str, workers: int,
                 extra: tuple[str, ...] = ()) -> subprocess.Popen:
    code = "import sys; from turngym.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", code, "serve", env_id, "--host", "127.0.0.1", "--port", str(port),
           "--max-sessions", str(max_sessions), "--executor", executor, "--workers", str(workers), *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("the server did not come up within 60 s")


def stop_server(proc: subprocess.Popen) -> None:
    """Stop a server from :func:`start_server` and everything it started (its process group)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def _sampled_actions(env_id: str, n: int = 64) -> list[str]:
    """For families without a fixed action list: draws from the env's own action grammar."""
    import numpy as np

    import turngym

    env = turngym.make(env_id)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    return [env.sample_action(rng) for _ in range(n)]


def bench_env(args: argparse.Namespace, env_id: str) -> dict:
    import turngym

    family = turngym.env_info(env_id).family
    actions = ACTIONS.get(family) or _sampled_actions(env_id)
    port = free_port()
    proc = start_server(env_id, port, max(args.levels) + 16, args.executor, args.workers)
    url = f"ws://127.0.0.1:{port}"
    levels: list[Level] = []
    started = time.monotonic()
    try:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:  # pragma: no cover
            runner = asyncio.run
        for n in args.levels:
            if time.monotonic() - started > args.time_budget:
                break
            cpu0 = _cpu_seconds(proc.pid)
            level = runner(run_level(url, env_id, n, args.steps, actions, args.timeout))
            level.server_cpu_us_per_step = (_cpu_seconds(proc.pid) - cpu0) / max(level.steps, 1) * 1e6
            levels.append(level)
            if not args.json:
                print(f"  {env_id} N={n:>5}: success {level.success:6.1%}  {level.steps_per_s:7.0f} steps/s  "
                      f"P50 {level.step_p50_ms:6.1f} ms  P99 {level.step_p99_ms:7.1f} ms  "
                      f"connect P50 {level.connect_p50_ms:6.1f} ms  server CPU {level.server_cpu_us_per_step:5.0f} us/step",
                      file=sys.stderr, flush=True)
            if level.success < 0.95:
                break
        paced = None
        if args.paced_sessions and time.monotonic() - started < args.time_budget:
            think = args.paced_sessions / args.paced_rate
            paced = runner(run_level(url, env_id, args.paced_sessions, args.paced_steps, actions, args.timeout, think))
            if not args.json:
                print(f"  {env_id} paced N={paced.sessions}: success {paced.success:6.1%}  "
                      f"{paced.steps_per_s:7.0f} steps/s  P50 {paced.step_p50_ms:6.1f} ms  "
                      f"P99 {paced.step_p99_ms:7.1f} ms", file=sys.stderr, flush=True)
    finally:
        stop_server(proc)
    good = [lv for lv in levels if lv.success >= 0.95]
    best = max(good, key=lambda lv: lv.sessions) if good else None
    cores = os.cpu_count() or 1
    return {
        "env_id": env_id,
        "setup": f"local-uvicorn ({args.workers} worker, {args.executor} executor, 1 client process)",
        "cores": cores,
        "max_batch": best.sessions if best else 0,
        "batch_per_core": (best.sessions / cores) if best else 0.0,
        "p50_ms": best.step_p50_ms if best else None,
        "p99_ms": best.step_p99_ms if best else None,
        "rps": best.steps_per_s if best else 0.0,
        "peak_rps": max((lv.steps_per_s for lv in good), default=0.0),
        "paced": asdict(paced) if paced else None,
        "levels": [asdict(lv) for lv in levels],
    }


def main(argv: list[str] | None = None) -> int:
    import turngym

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", action="append", help="env id (repeatable; default: math, and shop if registered)")
    p.add_argument("--levels", type=int, nargs="+", default=[100, 500, 1000, 1500, 2000])
    p.add_argument("--steps", type=int, default=20, help="steps per session per level")
    p.add_argument("--executor", choices=EXECUTORS, default="process")
    p.add_argument("--compare", nargs=2, choices=EXECUTORS, metavar=("BEFORE", "AFTER"),
                   help="run everything with both executors and report the steps/s ratio AFTER/BEFORE")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=float, default=30.0, help="per-request timeout (s)")
    p.add_argument("--time-budget", type=float, default=240.0, help="stop starting new levels after this (s)")
    p.add_argument("--paced-sessions", type=int, default=1000,
                   help="sessions of the paced run (0: skip), each thinking between steps like an LLM agent")
    p.add_argument("--paced-rate", type=float, default=2500.0, help="offered steps/s of the paced run")
    p.add_argument("--paced-steps", type=int, default=10, help="steps per session in the paced run")
    p.add_argument("--attack", action="store_true", help="health latency while hostile actions run (see above)")
    p.add_argument("--attack-deadline", type=float, default=3.0, help="the server's --request-timeout for --attack")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.attack:
        return _attack(args)
    env_ids = args.env or [i for i in ("turngym/Math-v0", "turngym/Shop-v0") if i in turngym.list_envs()]
    if args.compare:
        return _compare(args, env_ids)
    reports = [bench_env(args, env_id) for env_id in env_ids]
    if args.json:
        print(json.dumps(reports, indent=2))
        return 0
    print("\n| env | setup | load | max batch (>=95% success) | cores | batch/core | P50 | P99 | RPS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in reports:
        p50 = f"{r['p50_ms']:.1f} ms" if r["p50_ms"] is not None else "-"
        p99 = f"{r['p99_ms']:.1f} ms" if r["p99_ms"] is not None else "-"
        print(f"| {r['env_id']} | {r['setup']} | saturation (no think time) | {r['max_batch']:,} | {r['cores']} | "
              f"{r['batch_per_core']:.0f} | {p50} | {p99} | {r['rps']:,.0f} |")
        pc = r["paced"]
        if pc:
            batch = pc["sessions"] if pc["success"] >= 0.95 else 0
            print(f"| {r['env_id']} | {r['setup']} | {pc['mode']} | {batch:,} ({pc['success']:.1%} ok) | {r['cores']} | "
                  f"{batch / r['cores']:.0f} | {pc['step_p50_ms']:.1f} ms | {pc['step_p99_ms']:.1f} ms | "
                  f"{pc['steps_per_s']:,.0f} |")
    return 0


HOSTILE = {"huge_power_answer": "<answer>10**10**10</answer>", "calc_tag_flood": "<calc>" * 40000}


async def _health_during(url: str, http_url: str, actions: list[str], timeout: float) -> dict:
    """Play ``actions`` at once (one session each) while polling /health; latencies and how steps ended."""
    lat: list[float] = []
    ends: list[float] = []
    done = asyncio.Event()

    async def poll() -> None:
        async with httpx.AsyncClient() as client:
            while not done.is_set():
                t = time.perf_counter()
                try:
                    await client.get(f"{http_url}/health", timeout=30)
                    lat.append(time.perf_counter() - t)
                    ends.append(time.perf_counter())
                except httpx.HTTPError:
                    lat.append(float("inf"))
                await asyncio.sleep(0.05)

    async def play(action: str) -> tuple[str, float]:
        env = AsyncRemoteEnv(url, "turngym/Math-v0", retries=1, request_timeout=timeout)
        try:
            await env.reset(seed=0)
            t = time.perf_counter()
            *_, info = await env.step(action)
            took = time.perf_counter() - t
            reason = (info.get("outcome") or {}).get("reason")
            how = ("infra_error" if info["infra_error"] else
                   reason if reason in ("step_timeout", "worker_crash", "memory_limit") else
                   "invalid_action" if not info["action_valid"] else "valid_turn")
            return how, took
        finally:
            await env.close()

    poller = asyncio.ensure_future(poll())
    await asyncio.sleep(0.3)
    results = await asyncio.gather(*(play(a) for a in actions))
    await asyncio.sleep(0.3)
    done.set()
    await poller
    # a server thread holding the GIL freezes an in-process poller too: the longest gap between
    # answered polls (less the 50 ms pause) is the time health was unavailable, whoever was frozen
    gap = max((b - a for a, b in zip(ends, ends[1:])), default=float("nan")) - 0.05
    return {"health_p50_ms": _pct(lat, 0.5) * 1e3, "health_max_ms": max(lat) * 1e3, "health_polls": len(lat),
            "health_max_gap_ms": gap * 1e3,
            "answered_as": [r[0] for r in results], "step_s_max": max(r[1] for r in results)}


def _attack(args: argparse.Namespace) -> int:
    """Health latency under hostile actions, on a real ``turngym serve`` subprocess."""
    port = free_port()
    proc = start_server("turngym/Math-v0", port, 64, args.executor, 1,
                        ("--request-timeout", str(args.attack_deadline)))
    url, http_url = f"ws://127.0.0.1:{port}", f"http://127.0.0.1:{port}"
    report: dict = {"executor": args.executor, "deadline_s": args.attack_deadline, "attacks": {}}
    try:
        for name, action in HOSTILE.items():
            report["attacks"][name] = asyncio.run(_health_during(url, http_url, [action], args.timeout))
        report["attacks"]["all_at_once_x4"] = asyncio.run(
            _health_during(url, http_url, [a for a in HOSTILE.values() for _ in range(2)], args.timeout))
    finally:
        stop_server(proc)
    # the same, against a step that holds the GIL for 10 s (a test double served in this process)
    from turngym.server.testing import GilHoldingTestEnv, ServerThread

    with ServerThread(factories={"turngym/Math-v0": GilHoldingTestEnv}, executor=args.executor,
                      request_timeout_s=args.attack_deadline) as srv:
        report["attacks"]["gil_hold_10s_test_double"] = asyncio.run(
            _health_during(srv.url, srv.http_url, ["<hold>10</hold>"], args.timeout))
    # blame on one shared worker: an innocent step next to a GIL hog, then next to a step that crashes the
    # worker; the hostile step should be answered as its agent's failure, the innocent one as infra_error
    # (process executor only: in-process executors would crash or freeze this benchmark with the server)
    with ServerThread(factories={"turngym/Math-v0": GilHoldingTestEnv}, executor="process", processes=1,
                      request_timeout_s=args.attack_deadline) as srv:
        for name, hostile in (("blame_innocent_vs_gil_hog", "<hold>10</hold>"),
                              ("blame_innocent_vs_segfault", "<crash>SIGSEGV</crash>")):
            if args.executor == "process":
                report["attacks"][name] = asyncio.run(
                    _health_during(srv.url, srv.http_url, ["<sleep>1</sleep>", hostile], args.timeout))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for name, r in report["attacks"].items():
        print(f"{name:>18}: health p50 {r['health_p50_ms']:.1f} ms, max {r['health_max_ms']:.1f} ms, "
              f"longest gap {r['health_max_gap_ms']:.0f} ms "
              f"({r['health_polls']} polls); steps answered as {r['answered_as']} (slowest {r['step_s_max']:.1f} s)")
    return 0


def _compare(args: argparse.Namespace, env_ids: list[str]) -> int:
    """Both executors, same levels, one run: the steps/s ratio is what isolation costs here."""
    before, after = args.compare
    rows = []
    for env_id in env_ids:
        runs = {}
        for executor in (before, after):
            args.executor = executor
            runs[executor] = bench_env(args, env_id)
        b, a = runs[before], runs[after]
        paced_b = (b["paced"] or {}).get("steps_per_s") or 0.0
        paced_a = (a["paced"] or {}).get("steps_per_s") or 0.0
        per_level = []
        for lb, la in zip(b["levels"], a["levels"]):
            if lb["sessions"] == la["sessions"] and lb["steps_per_s"]:
                per_level.append({"sessions": lb["sessions"], f"{before}_steps_per_s": lb["steps_per_s"],
                                  f"{after}_steps_per_s": la["steps_per_s"],
                                  "ratio": la["steps_per_s"] / lb["steps_per_s"],
                                  f"{before}_p50_ms": lb["step_p50_ms"], f"{after}_p50_ms": la["step_p50_ms"],
                                  f"{before}_cpu_us_per_step": lb["server_cpu_us_per_step"],
                                  f"{after}_cpu_us_per_step": la["server_cpu_us_per_step"]})
        rows.append({
            "env_id": env_id, "before": before, "after": after,
            "peak_steps_per_s": {before: b["peak_rps"], after: a["peak_rps"]},
            "peak_ratio": (a["peak_rps"] / b["peak_rps"]) if b["peak_rps"] else None,
            "paced_steps_per_s": {before: paced_b, after: paced_a},
            "paced_ratio": (paced_a / paced_b) if paced_b else None,
            "levels": per_level,
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"\n{r['env_id']}: peak saturated steps/s {r['before']} {r['peak_steps_per_s'][r['before']]:,.0f} -> "
              f"{r['after']} {r['peak_steps_per_s'][r['after']]:,.0f} (ratio {r['peak_ratio'] or float('nan'):.2f}); "
              f"paced {r['paced_steps_per_s'][r['before']]:,.0f} -> {r['paced_steps_per_s'][r['after']]:,.0f}")
        for lv in r["levels"]:
            print(f"  N={lv['sessions']:>5}: ratio {lv['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
