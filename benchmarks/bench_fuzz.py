"""Fuzz every registered env's ``step()`` with hostile actions, and time every action parser on
adversarial inputs of growing size.

    python benchmarks/bench_fuzz.py                          # 20 s per env (60 s for Code/SWE), table
    python benchmarks/bench_fuzz.py --seconds 120 --json     # longer run, machine-readable
    python benchmarks/bench_fuzz.py --envs turngym/Math-v0 --skip-scaling

**Step fuzzing.** For each env id: episodes from seeds 0, 1, …; each action is one of random
text over the action grammars' tokens, a grammar-aware mutation of the env's own
``oracle_action()`` / ``sample_action()`` (tokens inserted, spans cut or repeated, JSON leaves
replaced with huge, deep or wrongly typed values, tags wrapped around it), or a huge input
(a grammar token repeated up to a megabyte, deep bracket nesting, power towers and giant
literals). Per env it reports actions fuzzed, exceptions out of ``step()``, infra errors
(an agent's action must never cause one), signal-range violations and the max / p99 step time.
An action is also "slow" when its step passes ``--step-bound`` seconds.

**Hostile attacks** (``--hostile``, on by default). Every attack kind of
:mod:`turngym.core.hostile` (nesting of every bracket kind, 10^5-long binary and unary operator
chains, huge literals, NULs and lone surrogates, 1 MB actions, malformed tool JSON) at several
sizes, in every delivery the env's grammar offers (its tags, tools, commands, its oracle's action
around the payload; SWE-v0's task file rewritten and edited again), in a shuffled order until the
env's time budget runs out. Per env: attacks sent, steps, escapes (exceptions out of ``step()``),
infra errors, contract violations, slow steps, and which attack kinds escaped.

**Parser scaling.** Each parser on 10 KB / 100 KB / 1 MB of adversarial text (repeated open
tags, unclosed fences, nested brackets, escaped quotes, ...). A linear parser takes about 10x
per 10x of input (growth 1); a quadratic one 100x (growth 2). A size that the growth seen so
far predicts to take more than ``--scaling-cap`` seconds is not run (the row says so).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import turngym  # noqa: E402
from turngym.core.checker import step_problems  # noqa: E402

#: Envs whose steps run code in a sandbox: slower per step, so a longer default and bound.
SLOW_ENVS = ("turngym/Code-v0", "turngym/SWE-v0")

#: Tokens of every action grammar (tags, JSON, fences, WebShop, ALFWorld, tool-call markers).
TOKENS = (
    "<calc>", "</calc>", "<answer>", "</answer>", "<search>", "</search>", "<action>", "</action>",
    "<tool_call>", "</tool_call>", "<run>", "</run>", "<submit/>", "<submit>", "```", "```python\n",
    "```json\n", "```py\n", "\n", " ", "\t", "search[", "click[", "]", "[", "{", "}", '"', "\\", '\\"',
    '"name"', '"arguments"', ":", ",", "null", "true", "1e999", "-0", "NaN", "[TOOL_CALLS]",
    "<|python_tag|>", "go to ", "take ", " from ", "put ", " in/on ", "open ", "clean ", " with ",
    "buy now", "< prev", "next >", "\x00", "\u2028", "İ", "\U0001f642", "**", "^", "!", "\\frac{", "\\binom{",
    "9" * 50, "10**10**10", "9**9**9", "(", ")", "/", "0", "-",
)

#: Answers and expressions that make a naive grader or calculator hang or blow up.
HOSTILE_MATH = (
    "10**10**10", "10^10^10", "10^{10^{10}}", "$10^{10^{10}}$", "\\boxed{2^{2^{40}}}", "9^{9999999}",
    "(10^{10})!", "$100000!$", "\\binom{1000000}{500000}", "$\\prod_{k=1}^{10^7} k$", "1e999999999",
    "1.5\\times 10^{99999999}", "9" * 5000, "(10**400)**0.5", "1.5**1000000.5", "sqrt(10**400+1)",
    "-" * 299 + "1", "(" * 150 + "1" + ")" * 150, "2**-10000", "10**1200//1e-300", "round(1, 10**30)",
)

#: JSON values that break a naive consumer of tool-call arguments.
HOSTILE_JSON = (
    10**4000, -(2**64), 1e308, -1e308, float("nan"), 2**63, -1, 0, "", "x" * 100_000, None, True,
    [], {}, "../../../../etc/passwd", "/etc/passwd", "\u0000", "İ" * 1000,
)


def _deep(n: int, open_ch: str = "[") -> str:
    close = {"[": "]", "{": "}"}[open_ch]
    inner = '{"a":' * n if open_ch == "{" else "[" * n
    return inner + "1" + (close * n)


def huge_inputs(rng: random.Random, max_bytes: int) -> str:
    """One huge or deep input: a token repeated up to ``max_bytes``, or deep nesting."""
    size = rng.choice([1_000, 10_000, 100_000, max_bytes])
    kind = rng.randrange(9)
    if kind == 0:
        tok = rng.choice(TOKENS)
        return tok * max(1, size // max(1, len(tok)))
    if kind == 1:
        return "[" * size
    if kind == 2:
        return _deep(min(size // 5, 200_000), "{")
    if kind == 3:
        return '{"name": "x", "arguments": ' + "[" * size
    if kind == 4:
        return '{"name": "x", "arguments": "' + "[" * size + '"}'
    if kind == 5:
        return "<tool_call>" + '{"name": "' + "\\" * size + '"}' + "</tool_call>"
    if kind == 6:
        return "```\n" + "x" * size
    if kind == 7:
        return "<answer>" + rng.choice(HOSTILE_MATH) + "</answer>"
    return "<calc>" + rng.choice(HOSTILE_MATH) + "</calc>"


def random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randrange(1, 30)):
        if rng.random() < 0.7:
            parts.append(rng.choice(TOKENS))
        else:
            parts.append("".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(1, 8))))
    return "".join(parts)


def _replace_leaf(obj: Any, rng: random.Random) -> Any:
    """A copy of decoded JSON with one leaf (or container) replaced by a hostile value."""
    if isinstance(obj, dict) and obj and rng.random() < 0.8:
        k = rng.choice(list(obj))
        return {**obj, k: _replace_leaf(obj[k], rng)}
    if isinstance(obj, list) and obj and rng.random() < 0.8:
        i = rng.randrange(len(obj))
        return obj[:i] + [_replace_leaf(obj[i], rng)] + obj[i + 1 :]
    choice = rng.randrange(4)
    if choice == 0:
        return rng.choice(HOSTILE_JSON)
    if choice == 1:
        return json.loads(_deep(rng.choice([10, 60, 63])))
    if choice == 2:
        return [obj] * rng.choice([2, 1000])
    return str(obj)


def mutate(base: str, rng: random.Random, max_bytes: int = 1_000_000) -> str:
    """A grammar-aware mutation of a valid action, at most ``max_bytes`` long."""
    text = base
    for _ in range(rng.randrange(1, 4)):
        text = text[:max_bytes]
        op = rng.randrange(8)
        n = len(text)
        i, j = sorted((rng.randrange(n + 1), rng.randrange(n + 1)))
        if op == 0:
            text = text[:i] + rng.choice(TOKENS) + text[i:]
        elif op == 1:
            text = text[:i] + text[j:]
        elif op == 2:
            text = text[:j] + text[i:j] * rng.choice([2, 10, 1000]) + text[j:]
        elif op == 3:
            text = text[:i]
        elif op == 4:
            text = rng.choice(TOKENS) + text + rng.choice(TOKENS)
        elif op == 5:
            text = text * rng.choice([2, 3, 50])
        elif op == 6:
            try:
                text = json.dumps(_replace_leaf(json.loads(text), rng))
            except (ValueError, TypeError, RecursionError):
                text = text[:i] + rng.choice(HOSTILE_MATH) + text[j:]
        else:
            text = text.upper() if rng.random() < 0.5 else text.replace(" ", "\n" * rng.randrange(1, 4))
    return text[:max_bytes]


def hostile_action(env: Any, rng: random.Random, max_bytes: int) -> str:
    """The next fuzzed action for ``env`` (mid-episode): random, mutated oracle/sample, or huge."""
    r = rng.random()
    if r < 0.25:
        return random_text(rng)
    if r < 0.85:
        base = env.oracle_action() if rng.random() < 0.7 else env.sample_action(np.random.default_rng(rng.randrange(1 << 30)))
        return mutate(base, rng, max_bytes)
    return huge_inputs(rng, max_bytes)


check_step = step_problems  # the env contract for one step (turngym.core.checker)


def fuzz_env(env_id: str, seconds: float, *, seed: int = 0, max_bytes: int = 1_000_000, step_bound: float = 2.0) -> dict[str, Any]:
    """Fuzz one env for ``seconds``; returns its figures (and the first few failures)."""
    rng = random.Random(seed)
    env = turngym.make(env_id)
    times: list[float] = []
    exceptions, infra, violations, slow = 0, 0, 0, 0
    failures: list[dict[str, Any]] = []
    episode = seed * 100_000
    try:
        warm_up(env, turngym.env_info(env_id).family)
        t_end = time.perf_counter() + seconds
        env.reset(seed=episode)
        while time.perf_counter() < t_end:
            action = hostile_action(env, rng, max_bytes)
            t0 = time.perf_counter()
            try:
                result = env.step(action)
            except Exception as exc:  # noqa: BLE001 - counting them is the point
                dt = time.perf_counter() - t0
                exceptions += 1
                if len(failures) < 5:
                    failures.append({"kind": "exception", "action": action[:200], "error": traceback.format_exception_only(exc)[-1].strip()})
                result = None
            else:
                dt = time.perf_counter() - t0
                problems = check_step(env, result)
                infra += any(p.startswith("infra_error") for p in problems)
                violations += any(p.startswith("signal") for p in problems)
                if problems and len(failures) < 5:
                    failures.append({"kind": "contract", "action": action[:200], "error": "; ".join(problems)})
            times.append(dt)
            if dt > step_bound:
                slow += 1
                if len(failures) < 5:
                    failures.append({"kind": "slow", "action": action[:200], "error": f"{dt:.2f} s"})
            if result is None or result[2] or result[3]:
                episode += 1
                env.reset(seed=episode)
    finally:
        env.close()
    ts = sorted(times)
    return {
        "env_id": env_id,
        "actions": len(times),
        "exceptions": exceptions,
        "infra_errors": infra,
        "signal_violations": violations,
        "slow_steps": slow,
        "step_bound_s": step_bound,
        "max_step_s": max(ts) if ts else 0.0,
        "p99_step_s": ts[min(len(ts) - 1, int(0.99 * len(ts)))] if ts else 0.0,
        "failures": failures,
    }


# ----------------------------------------------------------------------------- hostile attacks
def warm_up(env: Any, family: str) -> None:
    """One untimed step per delivery of a harmless payload: the first answer check starts the math
    env's math-verify worker (seconds of imports), which is no step's cost."""
    from turngym.core.hostile import deliveries

    env.reset(seed=0)
    for way in deliveries(env, family):
        env.reset(seed=0)
        for action in way("\\frac{1}{2}"):
            if any(env.step(action)[2:4]):
                break



HOSTILE_SIZES = (1_000, 20_000, 100_000)


def hostile_env(env_id: str, seconds: float, *, seed: int = 0, step_bound: float = 2.0, sizes: tuple[int, ...] = HOSTILE_SIZES) -> dict[str, Any]:
    """Send ``env_id`` every (attack, size, delivery) of :mod:`turngym.core.hostile`, shuffled, for
    ``seconds``; count what escapes ``step()`` and what breaks the step contract."""
    from turngym.core.hostile import ATTACKS, deliveries, payload

    rng = random.Random(seed)
    family = turngym.env_info(env_id).family
    env = turngym.make(env_id)
    env.reset(seed=0)
    n_ways = len(deliveries(env, family))
    warm_up(env, family)
    combos = [(a, n, h) for a in sorted(ATTACKS) for n in sizes for h in range(n_ways)]
    rng.shuffle(combos)
    counts = {"attacks": 0, "steps": 0, "exceptions": 0, "infra_errors": 0, "signal_violations": 0, "contract": 0, "slow_steps": 0}
    escaped: dict[str, int] = {}
    failures: list[dict[str, Any]] = []
    times: list[float] = []
    t_end = time.perf_counter() + seconds
    try:
        for k, (attack, n, how) in enumerate(combos):
            if time.perf_counter() > t_end:
                break
            env.reset(seed=k % 8)
            ways = deliveries(env, family)
            counts["attacks"] += 1
            for action in ways[how % len(ways)](payload(attack, n)):
                counts["steps"] += 1
                t0 = time.perf_counter()
                try:
                    result = env.step(action)
                except Exception as exc:  # noqa: BLE001 - counting them is the point
                    times.append(time.perf_counter() - t0)
                    counts["exceptions"] += 1
                    escaped[attack] = escaped.get(attack, 0) + 1
                    if len(failures) < 5:
                        failures.append({"kind": "exception", "action": f"{attack} n={n} delivery {how}",
                                         "error": traceback.format_exception_only(exc)[-1].strip()})
                    break
                dt = time.perf_counter() - t0
                times.append(dt)
                problems = check_step(env, result) if isinstance(result, tuple) and len(result) == 5 else ["not a 5-tuple"]
                counts["infra_errors"] += any(p.startswith("an agent's action caused") for p in problems)
                counts["signal_violations"] += any(p.startswith("signal") for p in problems)
                counts["contract"] += bool(problems)
                if problems and len(failures) < 5:
                    failures.append({"kind": "contract", "action": f"{attack} n={n} delivery {how}", "error": "; ".join(problems)})
                if dt > step_bound:
                    counts["slow_steps"] += 1
                    if len(failures) < 5:
                        failures.append({"kind": "slow", "action": f"{attack} n={n} delivery {how}", "error": f"{dt:.2f} s"})
                if not problems and (result[2] or result[3]):
                    break
    finally:
        env.close()
    ts = sorted(times)
    return {
        "env_id": env_id,
        **counts,
        "combinations": len(combos),
        "attack_kinds": len(ATTACKS),
        "deliveries": n_ways,
        "escaped_by_attack": escaped,
        "step_bound_s": step_bound,
        "max_step_s": ts[-1] if ts else 0.0,
        "p99_step_s": ts[min(len(ts) - 1, int(0.99 * len(ts)))] if ts else 0.0,
        "failures": failures,
    }


# ----------------------------------------------------------------------------- parser scaling
def _parsers() -> dict[str, Callable[[str], Any]]:
    from turngym.core.parsing import parse_code_block, parse_tag, parse_tool_calls
    from turngym.envs.code.parsing import parse_code_action
    from turngym.envs.household.parsing import normalize, split_command
    from turngym.envs.math.verifier import check_answer
    from turngym.envs.shop.parsing import parse_action
    from turngym.envs.tools.parsing import parse_message

    return {
        "parse_tag": lambda t: parse_tag(t, ("calc", "answer", "search")),
        "parse_tool_calls": parse_tool_calls,
        "parse_code_block": parse_code_block,
        "tools.parse_message": parse_message,
        "household.normalize": lambda t: split_command(normalize(t)),
        "shop.parse_action": parse_action,
        "code.parse_code_action": parse_code_action,
        "math.check_answer": lambda t: check_answer(t[:1000], "17"),  # the env caps the body at 1000
    }


#: Adversarial inputs by name: a function of the size in bytes.
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "repeated <calc>": lambda n: "<calc>" * (n // 6),
    "repeated </calc + spaces": lambda n: "<calc>" + "</calc    " * (n // 10),
    "repeated <tool_call>": lambda n: "<tool_call>" * (n // 11),
    "repeated <action>": lambda n: "<action>" * (n // 8),
    "repeated <run>": lambda n: "<run>" * (n // 5),
    "repeated ``` (no newline)": lambda n: "```" * (n // 3),
    "unclosed fence": lambda n: "```python\n" + "x" * n,
    "nested [": lambda n: "[" * n,
    "nested {\"a\":": lambda n: '{"a":' * (n // 5),
    "escaped quotes": lambda n: '{"' + '\\"' * (n // 2),
    "flat []": lambda n: "[" + "[]," * (n // 3),
    "repeated search[": lambda n: "search[" * (n // 7),
    "put x x x ...": lambda n: "put " + "x " * (n // 2),
    "spaces then text": lambda n: "1" + " " * n + "x",
}


def parser_scaling(sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000), cap: float = 5.0) -> list[dict[str, Any]]:
    """Seconds per (parser, input, size), and the growth exponent between the two largest sizes
    run (1 = linear, 2 = quadratic). A size whose time, extrapolated with the growth seen so
    far, would pass ``cap`` seconds is not run."""
    rows = []
    for pname, parse in _parsers().items():
        parse("warm-up \\frac{1}{2}")  # imports, compiled patterns, the math-verify worker
        for iname, make in ADVERSARIAL.items():
            row: dict[str, Any] = {"parser": pname, "input": iname, "seconds": {}}
            done: list[tuple[int, float]] = []
            for size in sizes:
                if len(done) >= 2:
                    (s1, t1), (s2, t2) = done[-2:]
                    growth = math.log(max(t2, 1e-6) / max(t1, 1e-6)) / math.log(s2 / s1)
                    predicted = t2 * (size / s2) ** max(1.0, growth)
                    if predicted > cap:
                        row["skipped_larger"] = f"{size // 1000} KB not run: growth {growth:.1f} predicts {predicted:.0f} s"
                        break
                text = make(size)
                best = math.inf
                for _ in range(3):  # best of three: a GC pause is not the parser's growth
                    t0 = time.perf_counter()
                    parse(text)
                    best = min(best, time.perf_counter() - t0)
                    if best > 0.5:
                        break
                done.append((size, best))
                row["seconds"][str(size)] = done[-1][1]
            (s1, t1), (s2, t2) = done[-2:]
            row["growth"] = math.log(max(t2, 1e-6) / max(t1, 1e-6)) / math.log(s2 / s1)
            rows.append(row)
    return rows


def _worst_by_parser(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per parser, the input that made it slowest at the largest size it ran."""
    worst: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = (len(r["seconds"]) if "skipped_larger" not in r else 0, -max(r["seconds"].values()))
        cur = worst.get(r["parser"])
        if cur is None or key < (len(cur["seconds"]) if "skipped_larger" not in cur else 0, -max(cur["seconds"].values())):
            worst[r["parser"]] = r
    return worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="fuzzing time per env")
    ap.add_argument("--slow-seconds", type=float, default=60.0, help="fuzzing time for Code-v0 / SWE-v0")
    ap.add_argument("--envs", nargs="*", default=None, help="env ids (default: every registered env)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-bytes", type=int, default=1_000_000, help="largest huge input")
    ap.add_argument("--step-bound", type=float, default=2.0, help="a step slower than this counts as slow")
    ap.add_argument("--slow-step-bound", type=float, default=40.0,
                    help="the bound for Code-v0 / SWE-v0 (SWE-v0 runs the tests under a 30 s deadline, plus setup: 'x = 9**9**9**9' in a module is a 31 s step by design)")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--skip-fuzz", action="store_true")
    ap.add_argument("--skip-hostile", action="store_true", help="skip the turngym.core.hostile attacks")
    ap.add_argument("--hostile-seconds", type=float, default=60.0, help="hostile-attack time per env")
    ap.add_argument("--hostile-slow-seconds", type=float, default=240.0, help="hostile-attack time for Code-v0 / SWE-v0")
    ap.add_argument("--scaling-cap", type=float, default=5.0, help="skip a size predicted to take longer")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    out: dict[str, Any] = {}
    if not args.skip_scaling:
        out["parser_scaling"] = parser_scaling(cap=args.scaling_cap)
    if not args.skip_fuzz:
        out["fuzz"] = []
        for env_id in args.envs or sorted(turngym.list_envs()):
            slow_env = env_id in SLOW_ENVS
            r = fuzz_env(
                env_id,
                args.slow_seconds if slow_env else args.seconds,
                seed=args.seed,
                max_bytes=args.max_bytes,
                step_bound=args.slow_step_bound if slow_env else args.step_bound,
            )
            out["fuzz"].append(r)
            if not args.json:
                print(
                    f"{env_id:34s} actions {r['actions']:6d}  exceptions {r['exceptions']:3d}  infra {r['infra_errors']:3d}  "
                    f"signal-violations {r['signal_violations']:3d}  slow {r['slow_steps']:3d}  "
                    f"max {r['max_step_s']:.3f} s  p99 {r['p99_step_s']:.3f} s",
                    flush=True,
                )
                for f in r["failures"]:
                    print(f"    {f['kind']}: {f['error'][:160]}  <- {f['action'][:80]!r}")
    if not args.skip_hostile:
        out["hostile"] = []
        for env_id in args.envs or sorted(turngym.list_envs()):
            slow_env = env_id in SLOW_ENVS
            r = hostile_env(
                env_id,
                args.hostile_slow_seconds if slow_env else args.hostile_seconds,
                seed=args.seed,
                step_bound=args.slow_step_bound if slow_env else args.step_bound,
            )
            out["hostile"].append(r)
            if not args.json:
                print(
                    f"hostile {env_id:34s} attacks {r['attacks']:5d}/{r['combinations']:<5d} steps {r['steps']:5d}  "
                    f"escapes {r['exceptions']:3d}  infra {r['infra_errors']:3d}  contract {r['contract']:3d}  "
                    f"slow {r['slow_steps']:3d}  max {r['max_step_s']:.3f} s  p99 {r['p99_step_s']:.3f} s",
                    flush=True,
                )
                for f in r["failures"]:
                    print(f"    {f['kind']}: {f['error'][:160]}  <- {f['action']}")
    if args.json:
        print(json.dumps(out, indent=1))
    elif "parser_scaling" in out:
        print("\nparser scaling (seconds; worst adversarial input per parser):")
        for p, r in _worst_by_parser(out["parser_scaling"]).items():
            secs = "  ".join(f"{int(k) // 1000:>5d} KB {v:8.4f}" for k, v in r["seconds"].items())
            print(f"  {p:24s} {r['input']:28s} {secs}  growth {r['growth']:.2f}  {r.get('skipped_larger', '')}")
    bad = any(r["exceptions"] or r["infra_errors"] or r["signal_violations"] or r["slow_steps"]
              for r in out.get("fuzz", []) + out.get("hostile", []))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
