"""Rollout throughput with a real model: env turns/s, generated tokens/s, and the env's share.

Runs lockstep rollouts of ``turngym/Math-v0`` with the embedded tiny model (or any HF model)
at several batch sizes and splits the wall time into env stepping (``reset``/``step``), prompt
rendering (chat template + tokenization) and the rest (model forward passes and sampling).
The goal for the env share of a model rollout is < 5%.

    python benchmarks/bench_rollout.py                  # tiny model, batches 1, 8, 32
    python benchmarks/bench_rollout.py --json --batches 1 8
    python benchmarks/bench_rollout.py --model smollm2 --batches 8 --max-new-tokens 48
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import gymnasium as gym  # noqa: E402

import turngym  # noqa: E402
from turngym.agents import OracleAgent  # noqa: E402
from turngym.agents.hf import HFPolicy  # noqa: E402
from turngym.rollout import run_episodes  # noqa: E402


class TimedEnv(gym.Wrapper):
    """Accumulates the wall time spent inside the env's reset and step."""

    def __init__(self, env, clock: dict[str, float]) -> None:
        super().__init__(env)
        self.clock = clock

    def reset(self, **kwargs):
        t = time.perf_counter()
        try:
            return self.env.reset(**kwargs)
        finally:
            self.clock["env"] += time.perf_counter() - t

    def step(self, action):
        t = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            self.clock["env"] += time.perf_counter() - t


def instrument_renderer(policy: HFPolicy, clock: dict[str, float]) -> None:
    render = policy.renderer.render

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return render(*args, **kwargs)
        finally:
            clock["render"] += time.perf_counter() - t

    policy.renderer.render = timed  # type: ignore[method-assign]


def run(policy, batch: int, episodes: int, max_turns: int, seed: int) -> dict[str, float]:
    clock = {"env": 0.0, "render": 0.0}
    if isinstance(policy, HFPolicy):
        instrument_renderer(policy, clock)
    t0 = time.perf_counter()
    eps = run_episodes(
        lambda: TimedEnv(turngym.make("turngym/Math-v0", max_turns=max_turns), clock),
        policy,
        [seed + i for i in range(episodes)],
        batch_size=batch,
        env_id="turngym/Math-v0",
    )
    wall = time.perf_counter() - t0
    if isinstance(policy, HFPolicy):
        del policy.renderer.render  # back to the class's method
    turns = sum(len(e.turns) for e in eps)
    tokens = sum(len(t.token_ids or ()) for e in eps for t in e.turns)
    return {
        "batch": batch,
        "episodes": len(eps),
        "turns": turns,
        "generated_tokens": tokens,
        "wall_s": wall,
        "turns_per_s": turns / wall,
        "tokens_per_s": tokens / wall,
        "env_share": clock["env"] / wall,
        "render_share": clock["render"] / wall,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny, smollm2 or a model directory")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--episodes", type=int, default=0, help="episodes per batch size (default: max(4, batch))")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    policy = HFPolicy.from_pretrained(args.model, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    run(policy, 2, 2, 2, seed=10_000)  # warm-up: first-call allocations and lazy imports
    rows = [run(policy, b, args.episodes or max(4, b), args.max_turns, seed=0) for b in args.batches]
    oracle = run(OracleAgent(), 32, 256, args.max_turns, seed=0)
    meta = {
        "model": args.model,
        "parameters": sum(p.numel() for p in policy.model.parameters()),
        "device": str(policy.device),
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "max_new_tokens": args.max_new_tokens,
        "max_turns": args.max_turns,
        "oracle_env_turns_per_s": oracle["turns_per_s"],
    }
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return 0
    print(
        f"model {args.model} ({meta['parameters'] / 1e6:.1f}M params) on {meta['device']}, "
        f"{meta['torch_threads']} torch threads, load avg {meta['load_avg_1m']:.1f}"
    )
    print(
        f"{'batch':>5} {'episodes':>8} {'turns':>6} {'tokens':>7} {'wall s':>8} {'turns/s':>8} {'tok/s':>8} {'env %':>6} {'render %':>8}"
    )
    for r in rows:
        print(
            f"{r['batch']:>5} {r['episodes']:>8} {r['turns']:>6} {r['generated_tokens']:>7} {r['wall_s']:>8.2f} "
            f"{r['turns_per_s']:>8.2f} {r['tokens_per_s']:>8.1f} {100 * r['env_share']:>6.2f} {100 * r['render_share']:>8.2f}"
        )
    print(f"env alone (oracle agent, batch 32): {meta['oracle_env_turns_per_s']:.0f} turns/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
