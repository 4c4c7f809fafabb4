"""Env steps per second: turngym/Math-v0 with its oracle, side by side with peer envs.

Peers (measured only if installed: ``pip install gem-llm skyrl-gym``):
  * GEM ``game:GuessTheNumber-v0-easy`` — a fixed ``\\boxed{5}`` guess each turn;
  * skyrl-gym ``gsm8k_multi_turn`` — a wrong ``#### 0`` answer so episodes run all turns.

Our loop does more per step than either: the oracle picks the action, the env parses it,
evaluates the expression exactly, matches it against the gold chain, computes five signals
and hashes the state. Each measurement runs ``--seconds`` per repeat; the best repeat counts.

    python benchmarks/bench_math.py [--seconds 2] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable


def _oracle_episode(env, seed: int) -> list[str]:  # noqa: ANN001
    """Play one oracle episode; return its actions."""
    env.reset(seed=seed)
    actions = []
    while True:
        actions.append(env.oracle_action())
        *_, term, trunc, _ = env.step(actions[-1])
        if term or trunc:
            return actions


def bench_turngym(seconds: float) -> float:
    import turngym

    env = turngym.make("turngym/Math-v0")
    steps, seed = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        steps += len(_oracle_episode(env, seed))
        seed += 1
    return steps / (time.perf_counter() - t0)


def bench_turngym_step_only(seconds: float) -> float:
    """Only ``env.step``: the oracle's actions are computed once, then replayed."""
    import turngym

    env = turngym.make("turngym/Math-v0")
    scripts = [(seed, _oracle_episode(env, seed)) for seed in range(500)]
    steps = 0
    busy = 0.0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for seed, actions in scripts:
            env.reset(seed=seed)
            s = time.perf_counter()
            for a in actions:
                env.step(a)
            busy += time.perf_counter() - s
            steps += len(actions)
    return steps / busy


def bench_gem(seconds: float) -> float:
    import gem

    env = gem.make("game:GuessTheNumber-v0-easy")
    steps, seed = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.reset(seed=seed)
        seed += 1
        while True:
            _, _, term, trunc, _ = env.step("\\boxed{5}")
            steps += 1
            if term or trunc:
                break
    return steps / (time.perf_counter() - t0)


def bench_skyrl(seconds: float) -> float:
    import skyrl_gym

    extras = {"reward_spec": {"ground_truth": "72"}, "extra_info": {}, "max_turns": 5}
    steps = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env = skyrl_gym.make("gsm8k_multi_turn", env_config={}, extras=extras)
        env.init([{"role": "user", "content": "q"}])
        while True:
            out = env.step("Let me think. #### 0")
            steps += 1
            if out["done"]:
                break
    return steps / (time.perf_counter() - t0)


BENCHES: dict[str, Callable[[float], float]] = {
    "turngym/Math-v0 (oracle + step)": bench_turngym,
    "turngym/Math-v0 (step only)": bench_turngym_step_only,
    "gem game:GuessTheNumber-v0-easy": bench_gem,
    "skyrl-gym gsm8k_multi_turn": bench_skyrl,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results: dict[str, float | str] = {}
    for name, fn in BENCHES.items():
        try:
            results[name] = max(fn(args.seconds) for _ in range(args.repeats))
        except ImportError as exc:
            results[name] = f"not installed ({exc.name})"
    if args.json:
        print(json.dumps(results, indent=2))
        return
    ours = results["turngym/Math-v0 (oracle + step)"]
    print(f"{'env':<36} {'steps/s':>12} {'vs ours':>8}")
    for name, v in results.items():
        if isinstance(v, float):
            print(f"{name:<36} {v:>12,.0f} {v / ours:>7.2f}x")
        else:
            print(f"{name:<36} {v:>12}")


if __name__ == "__main__":
    main()
