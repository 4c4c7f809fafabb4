"""The update's forward and backward on a CPU: float32 against bfloat16 autocast (``cpu_bf16``).

Usage:
    python benchmarks/bench_train_dtype.py                      # SmolLM2-135M, LoRA on every linear module
    python benchmarks/bench_train_dtype.py --model tiny --json

What the learner does per micro-batch, on the learner's own code path: ``token_logprobs`` (the
vocabulary projection only at the policy's tokens, here the last quarter of each row) and the
backward of their mean, with adapters on every linear module (the small-pretrained recipe) or
none (``--full``). Both dtypes run in one process, alternating, so machine load hits them alike;
the best of ``--repeats`` after a warm-up is reported, with the ratio. The weights stay float32
in both: autocast only runs the matrix products in bf16, which is fast where the CPU has
``avx512_bf16`` or AMX and emulated (slower) where it has not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from typing import Any

import torch

from turngym.agents.hf import resolve_model_path
from turngym.trainers.batch import TokenBatch, token_logprobs
from turngym.trainers.learner import native_bf16_cpu


def _batch(rows: int, width: int, vocab: int) -> TokenBatch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, width), generator=g)
    mask = torch.zeros(rows, width - 1)
    mask[:, -(width // 4):] = 1.0  # the policy's tokens: a quarter of each multi-turn sample
    zeros = torch.zeros(rows, width - 1)
    return TokenBatch(input_ids=ids, attention_mask=torch.ones_like(ids), mask_next=mask, old_logp_next=zeros, adv_next=zeros)


def _step(model: Any, batch: TokenBatch, autocast: Any) -> float:
    t0 = time.perf_counter()
    with autocast():
        logp = token_logprobs(model, batch)
    (-(logp * batch.mask_next).sum() / batch.mask_next.sum()).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--width", type=int, default=384, help="tokens per row")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--full", action="store_true", help="train every weight instead of LoRA adapters")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(str(resolve_model_path(args.model)), dtype=torch.float32)
    if not args.full:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    model.train()
    batch = _batch(args.rows, args.width, model.config.vocab_size)
    arms = {"float32": contextlib.nullcontext, "bf16_autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16)}
    times: dict[str, list[float]] = {name: [] for name in arms}
    for ac in arms.values():
        _step(model, batch, ac)  # warm-up: oneDNN picks its kernels on the first call
    for _ in range(args.repeats):
        for name, ac in arms.items():
            times[name].append(_step(model, batch, ac))
    tokens = args.rows * args.width
    result = {"model": args.model, "rows": args.rows, "width": args.width, "lora": not args.full, "threads": args.threads,
              "native_bf16": native_bf16_cpu(), "cpu": torch.backends.cpu.get_cpu_capability(),
              **{f"{n}_s": round(min(t), 3) for n, t in times.items()},
              **{f"{n}_tokens_per_s": round(tokens / min(t), 1) for n, t in times.items()}}
    result["bf16_over_float32"] = round(min(times["bf16_autocast"]) / min(times["float32"]), 3)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{args.model}, {args.rows} × {args.width} tokens, {'LoRA all-linear' if not args.full else 'full'}: "
              f"float32 {result['float32_s']} s, bf16 autocast {result['bf16_autocast_s']} s "
              f"({result['bf16_over_float32']}× the time; native bf16: {result['native_bf16']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
