"""The container backend against bubblewrap, in one run: exec latency, Code-v0 and SWE-v0 step time.

    python benchmarks/bench_docker.py            # table
    python benchmarks/bench_docker.py --json     # machine-readable
    python benchmarks/bench_docker.py -n 50 --episodes 4

Needs a Docker engine and the sandbox image (``scripts/docker_engine.sh up`` then
``python scripts/docker_images.py sandbox``). Rows, each for ``docker`` and ``bubblewrap``:

  session-python   ``Session.run_python("print(1)")`` in one live session (docker: one exec)
  session-shell    ``Session.run("true")`` in one live session
  oneshot-python   ``Sandbox.run_python`` (docker: a wiped pooled container; bubblewrap: fresh workdir)
  write-read       ``write_files`` of one small file then ``read_file`` in a session
  code-step        mean wall time of one Code-v0 ``step`` (random actions then the oracle's, one-shot
                   runs on both backends, so the sandbox is the only difference)
  code-step-warm   the same with bubblewrap's default warm worker (docker has none)
  swe-grade        one SWE-v0 hidden-evaluation run (the task's suite plus the canary, cache cleared)
  swe-step         mean wall time of one SWE-v0 ``step`` (random tool calls then the oracle's)

Latency rows are measured round-robin over the backends (p50/p99 over ``n``);
``ratio_docker_over_bubblewrap`` is docker's p50 (or mean step) over bubblewrap's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import turngym
from turngym.sandbox import BubblewrapSandbox, Sandbox
from turngym.sandbox.docker import DockerSandbox


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _latency(rows: dict[str, Callable[[], object]], n: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {k: [] for k in rows}
    for fn in rows.values():  # warm-up
        fn()
    for _ in range(n):
        for name, fn in rows.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: {"p50_ms": round(_pct(v, 0.5) * 1e3, 2), "p99_ms": round(_pct(v, 0.99) * 1e3, 2)} for k, v in times.items()}


def _timed_steps(env: Any, episodes: int, sampled: int, total: int) -> list[float]:
    """Wall time of every step: ``sampled`` random actions, then the oracle's, per episode."""
    durations: list[float] = []
    for seed in range(episodes):
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for i in range(total):
            action = env.sample_action(rng) if i < sampled else env.oracle_action()
            t = time.perf_counter()
            *_, term, trunc, _info = env.step(action)
            durations.append(time.perf_counter() - t)
            if term or trunc:
                break
    return durations


def _stats(durations: list[float]) -> dict[str, float]:
    return {"mean_ms": round(statistics.mean(durations) * 1e3, 1), "p50_ms": round(_pct(durations, 0.5) * 1e3, 1),
            "steps": len(durations)}


def _code_steps(sandbox: Sandbox, episodes: int, warm: bool) -> dict[str, float]:
    env = turngym.make("turngym/Code-v0", sandbox=sandbox, warm=warm)
    try:
        return _stats(_timed_steps(env, episodes, 3, 6))
    finally:
        env.close()


def _swe(sandbox: Sandbox, episodes: int, grades: int) -> dict[str, dict[str, float]]:
    """SWE-v0 with its grader in ``sandbox``: one grading run, and a step, wall time."""
    from turngym.envs.swe import testing

    testing.set_executor(testing.SandboxExecutor(sandbox))
    env = turngym.make("turngym/SWE-v0")
    grading: list[float] = []
    try:
        steps = _timed_steps(env, episodes, 2, 10)
        tree = env.start_tree(env.tasks[0])
        for _ in range(grades):
            testing._CACHE.clear()
            t = time.perf_counter()
            testing.run_pytest(tree, canary=True)
            grading.append(time.perf_counter() - t)
    finally:
        env.close()
        testing.set_executor(None)
    return {"swe-grade": _stats(grading), "swe-step": _stats(steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=40, help="runs per latency row")
    ap.add_argument("--episodes", type=int, default=4, help="Code-v0 episodes per backend")
    ap.add_argument("--swe-episodes", type=int, default=2, help="SWE-v0 episodes per backend")
    ap.add_argument("--swe-grades", type=int, default=5, help="uncached SWE grading runs per backend")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()

    dk, bw = DockerSandbox(), BubblewrapSandbox()
    sessions = {"docker": dk.open_session(), "bubblewrap": bw.open_session()}
    rows: dict[str, Callable[[], object]] = {}
    for name, sb in (("docker", dk), ("bubblewrap", bw)):
        s = sessions[name]
        rows[f"{name}/session-python"] = lambda s=s: s.run_python("print(1)")
        rows[f"{name}/session-shell"] = lambda s=s: s.run("true")
        rows[f"{name}/oneshot-python"] = lambda sb=sb: sb.run_python("print(1)")
        rows[f"{name}/write-read"] = lambda s=s: (s.write_files({"f.txt": "x" * 100}), s.read_file("f.txt"))
    try:
        lat = _latency(rows, args.n)
        steps = {
            "docker/code-step": _code_steps(dk, args.episodes, warm=False),
            "bubblewrap/code-step": _code_steps(bw, args.episodes, warm=False),
            "bubblewrap/code-step-warm": _code_steps(bw, args.episodes, warm=True),
        }
        for name, sb in (("docker", dk), ("bubblewrap", bw)):
            steps.update({f"{name}/{k}": v for k, v in _swe(sb, args.swe_episodes, args.swe_grades).items()})
    finally:
        for s in sessions.values():
            s.close()
        dk.close()
        bw.close()
    ratio = {k: round(lat[f"docker/{k}"]["p50_ms"] / lat[f"bubblewrap/{k}"]["p50_ms"], 1)
             for k in ("session-python", "session-shell", "oneshot-python", "write-read")}
    ratio["code-step"] = round(steps["docker/code-step"]["mean_ms"] / steps["bubblewrap/code-step"]["mean_ms"], 1)
    ratio["code-step-vs-warm"] = round(steps["docker/code-step"]["mean_ms"] / steps["bubblewrap/code-step-warm"]["mean_ms"], 1)
    for k in ("swe-grade", "swe-step"):
        ratio[k] = round(steps[f"docker/{k}"]["mean_ms"] / steps[f"bubblewrap/{k}"]["mean_ms"], 1)
    report = {"n": args.n, "episodes": args.episodes, "cores": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2),
              "latency": lat, "code_step": steps, "ratio_docker_over_bubblewrap": ratio}
    if args.json:
        print(json.dumps(report))
        return
    print(f"{'row':32s} {'p50 ms':>9s} {'p99 ms':>9s}")
    for k, v in lat.items():
        print(f"{k:32s} {v['p50_ms']:9.2f} {v['p99_ms']:9.2f}")
    print(f"{'row':32s} {'mean ms':>9s} {'p50 ms':>9s} steps")
    for k, v in steps.items():
        print(f"{k:32s} {v['mean_ms']:9.1f} {v['p50_ms']:9.1f} {v['steps']}")
    print("docker / bubblewrap:", ", ".join(f"{k} {v}x" for k, v in ratio.items()))


if __name__ == "__main__":
    main()
