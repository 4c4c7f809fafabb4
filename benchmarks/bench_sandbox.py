"""Sandbox latency and throughput: a trivial Python run, bubblewrap vs a bare subprocess.

    python benchmarks/bench_sandbox.py            # table
    python benchmarks/bench_sandbox.py --json     # machine-readable
    python benchmarks/bench_sandbox.py -n 300 --workers 2
    python benchmarks/bench_sandbox.py --cpu-burn  # bystanders of sandboxes burning CPU (Limits.cpu_cores)

Rows:
  bare-subprocess      subprocess.run of the same interpreter command, no sandbox at all
  rlimit               RlimitSandbox.run_python (rlimits + group kill; not isolated)
  bubblewrap           BubblewrapSandbox.run_python, one-shot (fresh workdir per run)
  bubblewrap-session   the same in one persistent session (no workdir create/delete)
  bubblewrap-warm      WarmPython.run: fork of a warm interpreter inside a live session
  *-unhardened         the same without the whole-sandbox enforcement, the seccomp filter and
                       the hidden paths (``enforcement="off", seccomp=False, hidden_paths=()``):
                       what the hardening costs, measured in the same run

Latency is measured sequentially, round-robin over the rows (p50/p99 over n runs each);
throughput with ``--workers`` threads issuing runs concurrently (2 = this machine's cores).
``hardening_cost`` is each hardened row's p50 over its unhardened twin's.

``--cpu-burn``: ``--burners`` sandboxes each burn CPU in ``--procs`` processes (every one in a
session of its own, so the kernel's autogroups count each apart) for ``--burn-s`` seconds,
while a bystander sandbox starts and runs ``print(1)`` over and over. Three phases: idle
(no burn), the burn with no CPU cgroup (``enforcement="watchdog"``: what each sandbox got
before ``Limits.cpu_cores``), and the burn held to ``cpu_cores`` each. Reported: the
bystander's start+run latency (p50/max) and the cores each burner got (its own ``getrusage``
over its own wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from turngym.sandbox import (
    BubblewrapSandbox,
    Limits,
    NotIsolatedWarning,
    PythonRuntime,
    RlimitSandbox,
    RunResult,
    WarmPython,
)

SOURCE = "print(1)"


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def latencies(fns: dict[str, Callable[[], object]], n: int) -> dict[str, list[float]]:
    """Round-robin over the backends, so load changes on a shared machine hit all alike."""
    for fn in fns.values():
        for _ in range(5):
            fn()  # warm caches
    lat: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            lat[name].append(time.perf_counter() - t)
    return lat


def throughput(fn: Callable[[], object], n: int, workers: int) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: fn(), range(n)))
    return n / (time.perf_counter() - t)


def _burn_source(procs: int, seconds: float) -> str:
    """Spin in ``procs`` processes (each its own session); print CPU seconds used and wall span."""
    return (
        "import os, resource, time\n"
        f"t0, kids, pid = time.monotonic(), [], 1\n"
        f"for _ in range({procs - 1}):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.setsid()\n"
        "        break\n"
        "    kids.append(pid)\n"
        f"while time.monotonic() < t0 + {seconds}:\n"
        "    pass\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "for k in kids:\n"
        "    os.waitpid(k, 0)\n"
        "me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime, time.monotonic() - t0)\n"
    )


def _bystand(bystander: BubblewrapSandbox, until: Callable[[], bool]) -> list[float]:
    """Start-and-run latencies of the bystander until ``until()`` (at least three)."""
    lat: list[float] = []
    while not until() or len(lat) < 3:
        t = time.perf_counter()
        res = bystander.run_python(SOURCE)
        lat.append(time.perf_counter() - t)
        assert res.ok and res.stdout == "1\n", res
    return lat


def _burn_phase(sb: BubblewrapSandbox, bystander: BubblewrapSandbox, burners: int, source: str,
                settle_s: float) -> dict[str, float]:
    import threading

    results: list[RunResult] = []
    lock = threading.Lock()

    def burn() -> None:
        res = sb.run_python(source)
        with lock:
            results.append(res)

    threads = [threading.Thread(target=burn) for _ in range(burners)]
    for th in threads:
        th.start()
    time.sleep(settle_s)  # the burners are up
    lat = _bystand(bystander, lambda: not any(th.is_alive() for th in threads))
    for th in threads:
        th.join()
    used = [float(r.stdout.split()[0]) / float(r.stdout.split()[1]) for r in results if r.ok]
    return {"bystander_p50_ms": 1000 * statistics.median(lat), "bystander_max_ms": 1000 * max(lat),
            "burner_cores_mean": statistics.fmean(used) if used else float("nan"),
            "burner_cores_max": max(used) if used else float("nan"), "burners_ok": float(len(used))}


def cpu_burn(burners: int, procs: int, burn_s: float, cores: float) -> dict[str, dict[str, float]]:
    """The three phases of ``--cpu-burn`` (see the module docstring)."""
    bystander = BubblewrapSandbox()
    limits = Limits(wall_s=burn_s * 10 + 30, cpu_s=burn_s * 10 + 30, cpu_cores=cores)
    idle = _bystand(bystander, lambda: True)
    out = {"idle": {"bystander_p50_ms": 1000 * statistics.median(idle), "bystander_max_ms": 1000 * max(idle)}}
    for phase, enforcement in (("burn, no cpu cgroup", "watchdog"), (f"burn, cpu_cores={cores:g}", "auto")):
        sb = BubblewrapSandbox(limits, enforcement=enforcement)  # type: ignore[arg-type]
        out[phase] = _burn_phase(sb, bystander, burners, _burn_source(procs, burn_s), min(1.0, burn_s / 4))
        sb.close()
    bystander.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200, help="runs per measurement")
    ap.add_argument("--workers", type=int, default=2, help="concurrent runs for the throughput figure")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--cpu-burn", action="store_true", help="measure bystanders of CPU-burning sandboxes instead")
    ap.add_argument("--burners", type=int, default=4, help="--cpu-burn: sandboxes burning CPU")
    ap.add_argument("--procs", type=int, default=32, help="--cpu-burn: processes per burning sandbox")
    ap.add_argument("--burn-s", type=float, default=4.0, help="--cpu-burn: seconds each burner spins")
    ap.add_argument("--cores", type=float, default=0.5, help="--cpu-burn: Limits.cpu_cores of each burner")
    args = ap.parse_args()
    if args.cpu_burn:
        rows = cpu_burn(args.burners, args.procs, args.burn_s, args.cores)
        load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
        if args.json:
            print(json.dumps({"burners": args.burners, "procs": args.procs, "burn_s": args.burn_s, "cpu_cores": args.cores,
                              "cores": cores, "loadavg_1m": load, "phases": rows}, indent=2))
            return
        print(f"{args.burners} sandboxes x {args.procs} processes burning {args.burn_s:g} s; {cores} cores, "
              f"load average {load:.1f}")
        print(f"{'phase':<28} {'bystander p50 ms':>17} {'max ms':>8} {'cores/burner':>13} {'max':>6}")
        for name, r in rows.items():
            print(f"{name:<28} {r['bystander_p50_ms']:17.1f} {r['bystander_max_ms']:8.1f} "
                  f"{r.get('burner_cores_mean', float('nan')):13.2f} {r.get('burner_cores_max', float('nan')):6.2f}")
        return

    py = PythonRuntime()
    argv = [*py.argv(), "-c", SOURCE]
    env = {"PATH": "/usr/bin:/bin", **py.env()}

    def bare() -> None:
        r = subprocess.run(argv, env=env, capture_output=True)
        assert r.stdout == b"1\n"

    bw = BubblewrapSandbox()
    plain = BubblewrapSandbox(enforcement="off", seccomp=False, hidden_paths=())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotIsolatedWarning)
        rl = RlimitSandbox()
    session = bw.open_session()
    warm = WarmPython(bw.open_session())
    plain_session = plain.open_session()
    plain_warm = WarmPython(plain.open_session())

    def check(res) -> None:  # type: ignore[no-untyped-def]
        assert res.ok and res.stdout == "1\n", res

    fns: dict[str, Callable[[], object]] = {
        "bare-subprocess": bare,
        "rlimit": lambda: check(rl.run_python(SOURCE)),
        "bubblewrap": lambda: check(bw.run_python(SOURCE)),
        "bubblewrap-session": lambda: check(session.run_python(SOURCE)),
        "bubblewrap-warm": lambda: check(warm.run(SOURCE)),
        "bubblewrap-unhardened": lambda: check(plain.run_python(SOURCE)),
        "bubblewrap-session-unhardened": lambda: check(plain_session.run_python(SOURCE)),
        "bubblewrap-warm-unhardened": lambda: check(plain_warm.run(SOURCE)),
    }
    rows = {}
    for name, lat in latencies(fns, args.n).items():
        rows[name] = {
            "p50_ms": 1000 * statistics.median(lat),
            "p99_ms": 1000 * _percentile(lat, 0.99),
            "mean_ms": 1000 * statistics.fmean(lat),
            "runs_per_s": throughput(fns[name], args.n, args.workers),
        }
    enforced = bw.enforced_by()
    for w in (warm, plain_warm):
        w.close()
        w.session.close()
    for closable in (session, plain_session, bw, plain, rl):
        closable.close()
    base = rows["bare-subprocess"]["p50_ms"]
    for r in rows.values():
        r["p50_vs_bare"] = r["p50_ms"] / base
    cost = {name: rows[name]["p50_ms"] / rows[f"{name}-unhardened"]["p50_ms"]
            for name in ("bubblewrap", "bubblewrap-session", "bubblewrap-warm")}
    load = os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0))
    if args.json:
        print(json.dumps({"n": args.n, "workers": args.workers, "cores": cores, "loadavg_1m": load,
                          "python": sys.version.split()[0], "enforced_by": enforced, "hardening_cost": cost,
                          "rows": rows}, indent=2))
        return
    print(f"trivial Python run ({SOURCE!r}), n={args.n}, throughput with {args.workers} workers; "
          f"{cores} cores, load average {load:.1f} (other work on the machine inflates every row)")
    print(f"{'backend':<30} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'runs/s':>8} {'p50/bare':>9}")
    for name, r in rows.items():
        print(f"{name:<30} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['mean_ms']:8.1f} {r['runs_per_s']:8.1f} {r['p50_vs_bare']:9.2f}")
    print("hardening cost (p50 hardened / unhardened): " + ", ".join(f"{k} {v:.2f}x" for k, v in cost.items()))
    print("enforced by: " + "; ".join(f"{k}: {v}" for k, v in enforced.items()))


if __name__ == "__main__":
    main()
