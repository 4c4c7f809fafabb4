"""Peak memory and time of one ``turngym train --episodes`` step on long captured episodes (SmolLM2, CPU).

Usage:
    python benchmarks/bench_train_memory.py                      # before and after, 16 episodes of ~2.6k tokens
    python benchmarks/bench_train_memory.py --variants after --cap-gb 6

The data is what ``turngym proxy`` writes for an agent like smolagents' (issue 36: 14 SmolLM2 episodes
of ~2.6k tokens each, killed by the kernel at 21 GB): recorded episodes (``meta["rendering"] =
"recorded"``) whose first prompt is ~1.1k tokens (a framework's system prompt and the task), then six
turns of ~180 sampled tokens, each followed by a ~70-token observation, in four GRPO groups of four
with mixed outcomes. The ids are drawn at random from SmolLM2's vocabulary: the memory and time of an
update depend on the lengths, not on which ids they are.

Each variant trains one RL step in its own process (``Trainer`` with ``model="smollm2"``,
``steps=1``, the saved-episode defaults of ``turngym train --episodes``) while this process samples
its resident set every 0.2 s; past ``--cap-gb`` the child is killed and the variant is reported as
exceeding the cap (``oom_at_cap``), the way the kernel would have killed it later:

* ``before``: the previous update path: micro-batches by rows only (``micro_batch_size=32``: every
  episode in one forward), the logits of every policy token at once, no activation checkpointing
  (``max_tokens_per_micro_batch=0``, ``logit_chunk_tokens=0``, ``gradient_checkpointing=False``);
* ``after``: the defaults: micro-batches of at most 8192 padded tokens, logits 1024 policy tokens at
  a time (checkpointed), decoder layers recomputed in backward.

Figures go to ``benchmarks/results/train_memory.json`` (and the markdown table beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS: dict[str, dict[str, Any]] = {
    "before": {"max_tokens_per_micro_batch": 0, "logit_chunk_tokens": 0, "gradient_checkpointing": False},
    "after": {},
}


def make_episodes(path: Path, *, n: int, tokens: int, vocab: int, seed: int = 0) -> dict[str, float]:
    """Write ``n`` recorded episodes of about ``tokens`` tokens each to ``path``; returns their sizes."""
    import numpy as np

    from turngym.agents.render import RECORDED
    from turngym.rollout.types import Episode, Turn, save_episodes

    rng = np.random.default_rng(seed)
    scale = tokens / 2530  # 1100 + 6 × 180 + 5 × 70 at scale 1
    episodes, lengths, policy = [], [], []
    for e in range(n):
        ids = rng.integers(0, vocab, int(1100 * scale * rng.uniform(0.95, 1.05))).tolist()
        turns = []
        for t in range(6):
            prompt = list(ids)
            sampled = rng.integers(0, vocab, int(180 * scale * rng.uniform(0.9, 1.1))).tolist()
            last = t == 5
            reward = float((e + e // 4) % 2) if last else 0.0  # each group of four: two solved, two not
            turns.append(Turn(t, "", "", reward, last, False, {}, f"s{t + 1}", f"s{t}", token_ids=sampled,
                              logprobs=rng.uniform(-4.0, -0.01, len(sampled)).round(4).tolist(), prompt_ids=prompt,
                              node=t, parent=t - 1))
            ids = prompt + sampled
            if not last:
                ids += rng.integers(0, vocab, int(70 * scale * rng.uniform(0.9, 1.1))).tolist()
        solved = turns[-1].reward > 0
        episodes.append(Episode(f"bench/{e // 4}/{e % 4}", "proxy", str(e // 4), e // 4, "", group=f"bench/{e // 4}", turns=turns,
                                outcome={"reward": turns[-1].reward, "success": solved},
                                meta={"rendering": RECORDED, "model": "smollm2"}))
        lengths.append(len(ids))
        policy.append(sum(len(t.token_ids) for t in turns))
    save_episodes(episodes, path)
    return {"episodes": n, "mean_tokens": float(np.mean(lengths)), "max_tokens": int(max(lengths)),
            "mean_policy_tokens": float(np.mean(policy))}


def child(variant: str, data: Path, run: Path, result: Path) -> None:
    """Train one step of ``variant`` and write its figures to ``result``."""
    import resource

    from turngym.trainers import TrainConfig, Trainer

    config = TrainConfig(episodes=str(data), model="smollm2", steps=1, warmup_steps=0, eval_episodes=0, tiny_model={},
                         **VARIANTS[variant])
    t0 = time.perf_counter()
    Trainer(config, run, progress=False, log=None).run()
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    [rl] = [r for r in rows if r.get("phase") == "rl"]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss / 2**20  # KiB on Linux
    cpu = usage.ru_utime + usage.ru_stime  # on a shared machine, closer to the work than the wall time
    result.write_text(json.dumps({"step_s": rl.get("step_s"), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                                  "ru_maxrss_gb": round(peak, 3),
                                  "loss": rl.get("loss"), "tokens": rl.get("tokens"), "skipped_updates": rl.get("skipped_updates")}))


def measure(variant: str, data: Path, work: Path, cap_gb: float) -> dict[str, Any]:
    """Run ``variant`` in a child process, sampling its RSS; kill it past ``cap_gb``."""
    import psutil

    result = work / f"{variant}.json"
    cmd = [sys.executable, __file__, "--child", variant, "--data", str(data), "--run", str(work / f"run-{variant}"),
           "--result", str(result)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=os.environ.copy())
    ps, peak, killed_at = psutil.Process(proc.pid), 0, None
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss
        except psutil.NoSuchProcess:
            break
        peak = max(peak, rss)
        if rss > cap_gb * 2**30:
            killed_at = time.perf_counter() - t0
            proc.kill()
            break
        time.sleep(0.2)
    proc.wait()
    out: dict[str, Any] = {"variant": variant, "settings": VARIANTS[variant], "peak_rss_gb": round(peak / 2**30, 3)}
    if killed_at is not None:
        return out | {"oom_at_cap": True, "cap_gb": cap_gb, "killed_after_s": round(killed_at, 1)}
    if proc.returncode != 0:
        return out | {"failed": proc.returncode}
    child_figures = json.loads(result.read_text())
    return out | child_figures | {"peak_rss_gb": round(max(peak / 2**30, child_figures["ru_maxrss_gb"]), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="before,after")
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--tokens", type=int, default=2600)
    p.add_argument("--cap-gb", type=float, default=8.0, help="kill a variant whose resident set passes this (the machine is shared)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "train_memory.json")
    p.add_argument("--child", choices=sorted(VARIANTS))
    p.add_argument("--data", type=Path)
    p.add_argument("--run", type=Path)
    p.add_argument("--result", type=Path)
    args = p.parse_args()
    if args.child:
        child(args.child, args.data, args.run, args.result)
        return
    from transformers import AutoConfig

    from turngym.agents.hf import smollm2_dir

    vocab = int(AutoConfig.from_pretrained(smollm2_dir()).vocab_size)
    with tempfile.TemporaryDirectory(prefix="bench-train-memory-") as tmp:
        work = Path(tmp)
        data = work / "episodes.jsonl"
        sizes = make_episodes(data, n=args.episodes, tokens=args.tokens, vocab=vocab)
        print(f"data: {sizes}", flush=True)
        rows = []
        for variant in args.variants.split(","):
            row = {"episodes": args.episodes} | measure(variant, data, work, args.cap_gb)
            print(json.dumps(row), flush=True)
            rows.append(row)
    import torch

    earlier = json.loads(args.out.read_text())["rows"] if args.out.exists() else []  # other variants / sizes measured before
    done = {(r["variant"], r["episodes"]) for r in rows}
    rows = [r for r in earlier if (r["variant"], r.get("episodes")) not in done] + rows
    report = {"benchmark": "one turngym train --episodes step, SmolLM2-135M (LoRA r=16 on every layer), CPU",
              "data": sizes | {"episodes": sorted({r["episodes"] for r in rows})},
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared with other jobs: "
              f"times are slow and noisy), torch {torch.__version__}, 1 torch thread (TrainConfig.threads)",
              "target_peak_rss_gb": 4.0, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
