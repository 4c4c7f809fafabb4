"""HF rollout speed: the static-cache decode loop against the original loop, tokens/s by batch size.

Same script on a CPU and a GPU (``--device``), every arm in one run so the figures compare as
ratios on a shared, noisy machine::

    python benchmarks/bench_hf_decode.py --model smollm2 --rows 1 16 --json          # CPU
    python benchmarks/bench_hf_decode.py --model smollm2 --rows 16 64 256 --json     # GPU

Arms: ``original`` (the first loop: growing cache, a host sync per row per token),
``static`` (:mod:`turngym.agents.hf_decode` eager, transformers' attention: the loop as of
2026-12-04), ``grouped`` (the same loop attending over written columns with grouped key/value
heads, the CPU default since 2026-12-06), ``bf16`` (``grouped`` on a bfloat16 copy of the model)
and, on CUDA, ``graphs`` (each decode step replayed as one CUDA graph). Every row gets a prompt of about
``--prompt-tokens`` tokens and samples exactly ``--new-tokens`` (no stop string, so the arms
do the same work); the best of ``--repeats`` timed calls after one warm-up call is reported, the
arms interleaved within each repeat, with the process CPU time beside the wall time (on a shared
machine wall time swings with the neighbours' load; CPU time much less).
Targets (issue #32): on an H200 with SmolLM2-135M, ≥ 5,000 tokens/s at 256 rows and ≥ 20× the
original loop's 110 tokens/s at 16 rows; on a CPU, static no slower than original. Issue #37: on a
CPU, ≥ 4× the ``static`` arm's tokens/s at 16 and 64 rows.

``--gap-rows k``: the bf16 arm's first ``k`` samples are scored teacher-forced under the bf16 model
(the learner's recompute in the sampler's dtype) and under the float32 model; the report gives the
per-token differences from the recorded log-probs (the bf16 vs fp32 log-prob gap).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from typing import Any

from bench_vllm import _prompts  # the same prompts the vLLM benchmark times


def _gap(sampler: Any, reference: Any, actions: list[Any]) -> dict[str, float]:
    """Recorded log-probs against teacher-forced recomputes in the sampler's dtype and in ``reference``'s."""
    import numpy as np

    seqs = [list(a.prompt_ids) + list(a.token_ids) for a in actions]
    masks = [[0] * len(a.prompt_ids) + [1] * len(a.token_ids) for a in actions]
    recorded = np.concatenate([np.asarray(a.logprobs, dtype=np.float64) for a in actions])
    out: dict[str, float] = {"tokens": float(recorded.size)}
    for name, pol in (("same_dtype", sampler), ("fp32", reference)):
        diff = recorded - np.concatenate([np.asarray(x, dtype=np.float64) for x in pol.score(seqs, masks)])
        out[f"{name}_mean_abs"] = round(float(np.abs(diff).mean()), 5)
        out[f"{name}_max_abs"] = round(float(np.abs(diff).max()), 5)
        out[f"{name}_mean"] = round(float(diff.mean()), 5)  # recorded − recompute: a per-token log-ratio
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from turngym.agents import AgentInput
    from turngym.agents.hf import HFPolicy

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if getattr(args, "threads", 0):
        torch.set_num_threads(args.threads)
    base = HFPolicy.from_pretrained(args.model, device=device)
    models = {"base": base.model}
    arms: dict[str, dict[str, Any]] = {"original": {"static_decoding": False}, "static": {"cuda_graphs": False, "grouped_attention": False}}
    if device.startswith("cuda"):
        arms["graphs"] = {"cuda_graphs": True}
    else:
        arms["grouped"] = {"grouped_attention": True}
        arms["bf16"] = {"grouped_attention": True, "model": "bf16"}
    if args.arms:  # in the order given: a second run in reverse order shows a load trend's bias
        arms = {k: arms[k] for k in args.arms if k in arms}
    if any(kw.get("model") == "bf16" for kw in arms.values()):
        models["bf16"] = copy.deepcopy(base.model).to(torch.bfloat16).eval()
    results: dict[str, Any] = {"model": args.model, "device": device, "dtype": str(base.model.dtype).replace("torch.", ""),
                               "new_tokens": args.new_tokens, "prompt_tokens": args.prompt_tokens, "threads": torch.get_num_threads(),
                               "rows": {}}
    if device.startswith("cuda"):
        results["gpu"] = torch.cuda.get_device_name()
    for rows in args.rows:
        inputs = [AgentInput(m, max_new_tokens=args.new_tokens) for m in _prompts(base.tokenizer, rows, args.prompt_tokens)]
        per: dict[str, Any] = {}
        policies: dict[str, Any] = {}
        for arm, kw in arms.items():
            if arm == "original" and rows > args.original_max_rows:
                continue
            kw = dict(kw)
            model = models[kw.pop("model", "base")]
            # eos ends a row early; masking it keeps every arm at exactly new_tokens per row
            policy = HFPolicy(model, base.tokenizer, seed=0, max_batch_size=max(rows, 1), prefix_cache_mb=0, **kw)
            policy.eos_ids = frozenset()
            # warm-up: allocation, graph capture (the same shapes on CUDA; on a CPU two rows suffice)
            policy.act(inputs if device.startswith("cuda") else inputs[:2])
            policies[arm] = policy
            per[arm] = {"wall": [], "cpu": [], "load_1min": []}
        actions: dict[str, Any] = {}
        for _ in range(args.repeats):  # arms interleaved per repeat: a load swing hits every arm alike
            for arm, policy in policies.items():
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                t0, c0 = time.perf_counter(), time.process_time()
                actions[arm] = policy.act(inputs)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                per[arm]["wall"].append(round(wall, 3))
                per[arm]["cpu"].append(round(cpu, 3))
                per[arm]["load_1min"].append(_load())
                print(f"[bench_hf_decode] rows={rows} {arm}: {rows * args.new_tokens / wall:,.0f} tokens/s "
                      f"({wall:.3f} s wall, {cpu:.3f} s CPU, load {per[arm]['load_1min'][-1]})", file=sys.stderr, flush=True)
        for arm, policy in policies.items():
            tokens = sum(len(a.token_ids) for a in actions[arm])
            best, cpu = min(per[arm]["wall"]), min(per[arm]["cpu"])
            per[arm].update(seconds=best, tokens=tokens, tokens_per_s=round(tokens / best, 1),
                            tokens_per_cpu_s=round(tokens / cpu, 1))
            if policy._static is not None and policy._static.graph_error:
                per[arm]["graph_error"] = policy._static.graph_error
            if arm == "bf16" and args.gap_rows:
                ref = HFPolicy(models["base"], base.tokenizer, prefix_cache_mb=0)
                per[arm]["logprob_gap"] = _gap(policy, ref, actions[arm][: args.gap_rows])
        for ref in ("original", "static"):
            if ref in per:
                for arm in per:
                    per[arm][f"speedup_vs_{ref}"] = round(per[arm]["tokens_per_s"] / per[ref]["tokens_per_s"], 2)
                    per[arm][f"cpu_speedup_vs_{ref}"] = round(per[arm]["tokens_per_cpu_s"] / per[ref]["tokens_per_cpu_s"], 2)
        results["rows"][str(rows)] = per
    return results


def _load() -> float:
    """The 1-minute load average (the machine is shared: figures compare only within one run)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return float(f.read().split()[0])
    except OSError:
        return float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 (default), tiny, or a model directory")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 16])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=200)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--original-max-rows", type=int, default=64, help="skip the original loop above this many rows (slow)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default; 1 is steadiest on a shared box)")
    p.add_argument("--arms", nargs="*", default=None, help="arms to run, in this order (default: all for the device)")
    p.add_argument("--gap-rows", type=int, default=0, help="score this many bf16 samples in bf16 and fp32 (log-prob gap)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    results = run(args)
    if args.json:
        print(json.dumps(results))
    else:
        for rows, per in results["rows"].items():
            print(f"rows={rows}: " + ", ".join(f"{a} {v['tokens_per_s']:,.0f} tok/s" for a, v in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
