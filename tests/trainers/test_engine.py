"""Training with a vLLM rollout engine: weight sync after every step, mismatch logged, TIS.

Runs where vLLM is installed (``scripts/ci_vllm.sh``); skips elsewhere. One two-step LoRA run
of the tiny model serves the module: rollouts on the engine, updates on the torch policy, the
merged weights pushed into the engine after each step — checked at each sync against an HF
recompute with the trainer's own model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if os.environ.get("TURNGYM_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vLLM is an optional extra (scripts/ci_vllm.sh runs these tests)")

import torch  # noqa: E402
from tiny_run import tiny_config  # noqa: E402

from turngym.agents import AgentInput  # noqa: E402
from turngym.agents.hf import HFPolicy  # noqa: E402
from turngym.agents.vllm_backend import VLLMPolicy  # noqa: E402
from turngym.trainers import Trainer  # noqa: E402
from turngym.trainers.engine import RolloutEngine, engine_weights  # noqa: E402

ENGINE = {"dtype": "float32", "enforce_eager": True, "kv_cache_gb": 0.25}
PROMPTS = [
    [{"role": "user", "content": "Ava has 12 marbles. She buys 7 more."}],
    [{"role": "user", "content": "Hugo has 5 crates with 20 apples in each. How many apples? " * 12}],  # fills a KV block
]


def engine_vs_trainer(engine: RolloutEngine, model: Any, tokenizer: Any) -> tuple[bool, float]:
    """Greedy continuations from the engine vs the trainer's model: same ids?, max |Δ log p|."""
    ours = VLLMPolicy(engine.llm, engine.tokenizer, temperature=0.0, max_new_tokens=8).act([AgentInput(m) for m in PROMPTS])
    hf = HFPolicy(model, tokenizer, temperature=0.0, max_new_tokens=8, prefix_cache_mb=0)
    theirs = hf.act([AgentInput(m) for m in PROMPTS])
    worst = 0.0
    for a in ours:
        [scores] = hf.score([a.prompt_ids + a.token_ids], [[0] * len(a.prompt_ids) + [1] * len(a.token_ids)])
        worst = max(worst, float(np.max(np.abs(np.array(scores) - a.logprobs))))
    return [a.token_ids for a in ours] == [a.token_ids for a in theirs], worst


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    out = tmp_path_factory.mktemp("engine_run")
    checks: list[tuple[str, bool, float]] = []
    trainer: Trainer

    def hook(event: str) -> None:
        if event.startswith("rl logged@"):  # the step's update has been pushed
            checks.append((event, *engine_vs_trainer(trainer.engine, trainer.model, trainer.tokenizer)))

    cfg = tiny_config(engine="vllm", engine_kwargs=ENGINE, lora=True, lora_rank=4, lr=2e-2, steps=2, max_new_tokens=8)
    trainer = Trainer(cfg, out, progress=False, log=None, hook=hook)
    trainer.run()
    rows = [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    return {"trainer": trainer, "rows": rows, "checks": checks, "out": Path(out)}


def test_engine_holds_the_trainers_weights_after_every_sync(run: dict[str, Any]) -> None:
    assert [c[0] for c in run["checks"]] == ["rl logged@1", "rl logged@2"]
    for _, same_ids, worst in run["checks"]:
        assert same_ids and worst < 2e-4


def test_mismatch_tis_and_sync_are_logged_every_step(run: dict[str, Any]) -> None:
    rl = [r for r in run["rows"] if r["phase"] == "rl"]
    assert len(rl) == 2
    for r in rl:
        # fp32 engine and trainer on the same weights: the engine's log-probs are the trainer's
        assert 0 <= r["mismatch_abs_mean"] <= r["mismatch_abs_max"] < 1e-3
        assert r["is_ratio_min"] <= r["is_ratio_mean"] <= r["is_ratio_max"] and r["tis_clip_frac"] == 0.0
        assert abs(r["tis_weight"] - 1.0) < 1e-3 and r["sync_s"] > 0 and r["sync_mb"] > 0
        assert 0 < r["rollout_s"] <= r["step_s"]


def test_lora_training_moved_the_merged_weights_the_engine_serves(run: dict[str, Any]) -> None:
    from transformers import AutoModelForCausalLM

    trainer = run["trainer"]
    start = AutoModelForCausalLM.from_pretrained(run["out"] / "warm_start").state_dict()
    now = dict(engine_weights(trainer.model))
    assert set(now) == set(start)
    moved = [k for k in now if not torch.equal(now[k], start[k])]
    assert moved and all("proj" in k for k in moved)  # LoRA adapts the linear layers only
    assert len(trainer.engine.syncs) >= 3  # warm start, then after each of the two steps


def test_full_weights_push_and_the_prefix_cache_is_dropped(run: dict[str, Any]) -> None:
    from transformers import AutoModelForCausalLM

    trainer = run["trainer"]
    engine = trainer.engine
    model = AutoModelForCausalLM.from_pretrained(run["out"] / "warm_start")
    engine.push(model)
    assert engine_vs_trainer(engine, model, trainer.tokenizer) == (True, pytest.approx(0.0, abs=2e-4))
    with torch.no_grad():  # a large update: the engine must answer with the new weights, not cached keys/values
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    stats = engine.push(model)
    same, worst = engine_vs_trainer(engine, model, trainer.tokenizer)
    assert same and worst < 2e-4
    assert stats.tensors == len(model.state_dict()) and stats.bytes > 0
