"""HF ``generate`` vs a vLLM engine in one run: tokens/s, weight-sync time, log-prob mismatch,
and the rollout share of an RL step with each engine.

Runs in the vLLM venv (``scripts/ci_vllm.sh --setup-only`` builds it)::

    VLLM_CPU_OMP_THREADS_BIND=0-1 /opt/vllmenv/bin/python benchmarks/bench_vllm.py --json
    ... --model tiny --train-steps 2        # the trainer part on the embedded model

1. **Generation**: ``--batch`` prompts (one or several sizes) of about ``--prompt-tokens`` tokens, ``--new-tokens`` each
   (no stop), sampled by :class:`~turngym.agents.hf.HFPolicy` (fp32, the trainer's dtype on a
   CPU) and by :class:`~turngym.agents.vllm_backend.VLLMPolicy` (``--dtype``, bf16 by default),
   best of ``--repeats`` timed calls each after one warm-up call.
2. **Mismatch**: the engine's sampled log-probs against an fp32 HF recompute of the same tokens
   (what the trainer's TIS weights correct).
3. **Sync**: pushing the full fp32 weights into the running engine
   (:meth:`~turngym.trainers.engine.RolloutEngine.push`), best of ``--repeats``.
4. **Training** (``--train-steps`` > 0): a short ``turngym train`` on ``--train-model`` with
   ``engine="hf"`` and with ``engine="vllm"`` (the trainer starts a vLLM engine of its own, part 1's
   is dropped first), reporting ``rollout_s / step_s`` per engine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def _log(msg: str) -> None:
    print(f"[bench_vllm] {msg}", file=sys.stderr, flush=True)


def _prompts(tokenizer: Any, n: int, length: int) -> list[list[dict[str, str]]]:
    words = "the agent reads the task and answers with one tool call per turn".split()
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        text = f"Task {i}: " + " ".join(rng.choice(words, size=length))
        ids = tokenizer(text)["input_ids"][:length]
        out.append([{"role": "user", "content": tokenizer.decode(ids)}])
    return out


def _timed(fn: Any, repeats: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def bench_generation(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    import torch

    from turngym.agents import AgentInput
    from turngym.agents.hf import HFPolicy, resolve_model_path
    from turngym.trainers.engine import RolloutEngine

    model_dir = resolve_model_path(args.model)
    hf = HFPolicy.from_pretrained(str(model_dir), max_new_tokens=args.new_tokens, seed=0, prefix_cache_mb=0, dtype="float32")
    hf.eos_ids = frozenset()  # fixed-length generations: both engines produce exactly --new-tokens
    batches = {n: [AgentInput(m) for m in _prompts(hf.tokenizer, n, args.prompt_tokens)] for n in args.batch}
    hf.act(batches[args.batch[0]][:2])
    hf_s = {}
    for n, batch in batches.items():
        _log(f"HF generate: {n} x {args.new_tokens} tokens, {torch.get_num_threads()} threads")
        hf_s[n], _ = _timed(lambda b=batch: hf.act(b), args.repeats)

    _log(f"starting the vLLM engine ({args.dtype})")
    engine = RolloutEngine(model_dir, engine_kwargs={"dtype": args.dtype, "enforce_eager": args.eager})
    policy = engine.policy(max_new_tokens=args.new_tokens, seed=0)
    from vllm import SamplingParams

    base = policy._params

    def fixed_length(*args: Any) -> SamplingParams:  # ignore EOS, as for HF above
        p = base(*args)
        p.ignore_eos = True
        return p

    policy._params = fixed_length  # type: ignore[method-assign]
    policy.act(batches[args.batch[0]][:2])
    rows, actions = [], []
    for n, batch in batches.items():
        _log(f"vLLM generate: {n} x {args.new_tokens} tokens")
        vllm_s, actions = _timed(lambda b=batch: policy.act(b), args.repeats)
        tokens = sum(len(a.token_ids) for a in actions)
        hf_tps, vllm_tps = n * args.new_tokens / hf_s[n], tokens / vllm_s
        rows.append({"batch": n, "hf_tokens_per_s": round(hf_tps, 1), "vllm_tokens_per_s": round(vllm_tps, 1),
                     "speedup": round(vllm_tps / hf_tps, 2)})

    _log("mismatch: engine log-probs vs an fp32 HF recompute (the last batch, 16 rows at most)")
    deltas = []
    for a in actions[:16]:
        [scores] = hf.score([a.prompt_ids + a.token_ids], [[0] * len(a.prompt_ids) + [1] * len(a.token_ids)])
        deltas += list(np.abs(np.array(scores) - np.array(a.logprobs)))

    _log("weight sync: full fp32 weights into the engine")
    sync_s, stats = _timed(lambda: engine.push(hf.model), args.repeats)
    report = {
        "model": args.model,
        "engine_dtype": args.dtype,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "hf_threads": torch.get_num_threads(),
        "engine_start_s": round(engine.start_seconds, 1),
        "generation": rows,
        "mismatch_abs_mean": round(float(np.mean(deltas)), 5),
        "mismatch_abs_max": round(float(np.max(deltas)), 4),
        "sync_s": round(sync_s, 3),
        "sync_mb": round(stats.bytes / 2**20, 1),
    }
    return report, engine


def bench_training(args: argparse.Namespace) -> dict[str, Any]:
    from turngym.trainers import TrainConfig, Trainer

    out: dict[str, Any] = {}
    for kind in ("hf", "vllm"):
        kwargs: dict[str, Any] = dict(
            model=args.train_model, steps=args.train_steps, engine=kind, warmup_steps=0 if args.train_model != "tiny" else 20,
            eval_episodes=2, groups_per_step=4, group_size=4, max_new_tokens=24, demo_episodes=64,
            engine_kwargs={"dtype": "float32", "enforce_eager": args.eager},
        )
        if args.train_model != "tiny":
            kwargs["env_kwargs"] = {"min_steps": 1, "max_steps": 1, "max_turns": 2}
        cfg = TrainConfig(**kwargs)
        with tempfile.TemporaryDirectory() as tmp:
            trainer = Trainer(cfg, Path(tmp), progress=False, log=_log)
            _log(f"training {args.train_steps} steps with engine={kind}")
            trainer.run()
            rows = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
        rl = [r for r in rows if r.get("phase") == "rl"]
        roll, step = sum(r["rollout_s"] for r in rl), sum(r["step_s"] for r in rl)
        out[kind] = {
            "rollout_share": round(roll / step, 3),
            "step_s": round(step / len(rl), 2),
            "rollout_tokens_per_s": round(sum(r["tokens"] for r in rl) / roll, 1),
            **({"sync_s": round(float(np.mean([r["sync_s"] for r in rl])), 3),
                "mismatch_abs_mean": round(float(np.mean([r["mismatch_abs_mean"] for r in rl])), 6)} if kind == "vllm" else {}),
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 (default), tiny or a model directory")
    p.add_argument("--dtype", default="bfloat16", help="the engine's dtype (the trainer's HF model is fp32)")
    p.add_argument("--batch", type=int, nargs="+", default=[16], help="rows per call; several sizes are timed in one run")
    p.add_argument("--prompt-tokens", type=int, default=200)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--eager", action="store_true", help="enforce_eager (faster engine start, no torch.compile)")
    p.add_argument("--train-steps", type=int, default=0, help="also time this many RL steps per engine (0 = skip)")
    p.add_argument("--train-model", default="tiny", help="model of the training part")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    report, engine = bench_generation(args)
    if args.train_steps:
        del engine  # the trainer starts its own engine (it owns its rollout engine from the config)
        gc.collect()
        report["training"] = bench_training(args)
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k:>20}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
