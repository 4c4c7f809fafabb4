"""The CPU fast path of the static loop: grouped key/value attention, and sampling in bfloat16.

SmolLM2 has 9 query heads over 3 key/value heads; the embedded tiny model has no grouping, so a
small random Llama with grouped heads stands in for it here (same code path as SmolLM2). In
float32 the grouped path must be the same function as transformers' attention: identical greedy
tokens and log-probs to float error, against both the static loop on transformers' attention and
the original loop. In bfloat16 the recorded log-probs must be finite and be what a teacher-forced
recompute in the same dtype gives (the learner's recompute), to bfloat16's precision.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from turngym.agents import AgentInput
from turngym.agents.hf import HFPolicy

torch = pytest.importorskip("torch")

from hf_prompts import PROMPTS  # noqa: E402


@pytest.fixture(scope="module")
def gqa_model() -> tuple:
    """A 2-layer random Llama with 4 query heads over 2 key/value heads, on the tiny model's tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = HFPolicy.from_pretrained("tiny").tokenizer
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # spread the logits: a flat random model would make every greedy choice a near tie
        model.lm_head.weight.mul_(20.0)
    return model, tok


def _acts(policy: HFPolicy) -> list:
    inputs = [AgentInput(m, stop=("e",) if i % 2 else (), max_new_tokens=4 + 3 * i) for i, m in enumerate(PROMPTS)]
    return policy.act(inputs)


def test_grouped_attention_equals_repeated_heads() -> None:
    from transformers.integrations.sdpa_attention import repeat_kv

    from turngym.agents.hf_decode import grouped_attention

    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 6, 5, 16, generator=g)
    k, v = torch.randn(3, 2, 11, 16, generator=g), torch.randn(3, 2, 11, 16, generator=g)
    mask = torch.rand(3, 1, 5, 11, generator=g) > 0.3
    mask[..., 0] = True
    ref = torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3), attn_mask=mask, scale=0.3)
    ref = ref.transpose(1, 2)
    torch.testing.assert_close(grouped_attention(q, k, v, mask, 0.3), ref, atol=1e-5, rtol=1e-5)
    half = grouped_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, 0.3)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), ref, atol=3e-2, rtol=3e-2)


def test_grouped_loop_equals_todays_loops_in_fp32(gqa_model) -> None:
    model, tok = gqa_model
    fast = HFPolicy(model, tok, temperature=0.0, grouped_attention=True)
    today = HFPolicy(model, tok, temperature=0.0, grouped_attention=False)
    original = HFPolicy(model, tok, temperature=0.0, static_decoding=False)
    assert fast._static.grouped and not today._static.grouped
    a, b, c = _acts(fast), _acts(today), _acts(original)
    assert [x.token_ids for x in a] == [x.token_ids for x in b] == [x.token_ids for x in c]
    assert sum(len(x.token_ids) for x in a) > 8
    for x, y, z in zip(a, b, c, strict=True):
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-4)
        np.testing.assert_allclose(x.logprobs, z.logprobs, atol=1e-4)


def test_sampled_fp32_logprobs_equal_the_recompute(gqa_model) -> None:
    model, tok = gqa_model
    policy = HFPolicy(model, tok, temperature=1.0, seed=3, grouped_attention=True)
    acts = _acts(policy)
    seqs = [a.prompt_ids + a.token_ids for a in acts]
    masks = [[0] * len(a.prompt_ids) + [1] * len(a.token_ids) for a in acts]
    for a, s in zip(acts, policy.score(seqs, masks), strict=True):
        np.testing.assert_allclose(a.logprobs, s, atol=1e-4)


def test_other_forwards_keep_transformers_attention(gqa_model) -> None:
    """The wrapped sdpa entry changes nothing for a forward that does not ask for the grouped path."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    model, tok = gqa_model
    HFPolicy(model, tok, grouped_attention=True)  # installs the wrapper
    wrapped = ALL_ATTENTION_FUNCTIONS["sdpa"]
    assert wrapped is not sdpa_attention_forward
    x = torch.tensor([[5, 9, 11, 3, 7]])
    with torch.inference_mode():
        got = model(input_ids=x).logits
        ALL_ATTENTION_FUNCTIONS.register("sdpa", sdpa_attention_forward)
        try:
            want = model(input_ids=x).logits
        finally:
            ALL_ATTENTION_FUNCTIONS.register("sdpa", wrapped)
    assert torch.equal(got, want)


def test_bf16_logprobs_are_finite_and_match_a_bf16_recompute(gqa_model) -> None:
    model, tok = gqa_model
    half = copy.deepcopy(model).to(torch.bfloat16).eval()
    policy = HFPolicy(half, tok, temperature=1.0, seed=1, grouped_attention=True)
    assert policy._static.grouped and policy._static.dtype == torch.bfloat16
    acts = _acts(policy)
    seqs = [a.prompt_ids + a.token_ids for a in acts]
    masks = [[0] * len(a.prompt_ids) + [1] * len(a.token_ids) for a in acts]
    recorded = np.concatenate([a.logprobs for a in acts])
    assert recorded.size > 8 and np.isfinite(recorded).all() and (recorded <= 0).all()
    same = np.concatenate(policy.score(seqs, masks))  # the learner's recompute in the sampler's dtype
    fp32 = np.concatenate(HFPolicy(model, tok).score(seqs, masks))
    # bf16 keeps 8 mantissa bits: a recompute through transformers' attention agrees to a few hundredths
    assert np.abs(recorded - same).max() < 0.1, np.abs(recorded - same).max()
    # and the recorded values are those of the tokens drawn: another token's log-prob would be far off
    assert np.abs(recorded - fp32).max() < 0.3
    shifted = np.concatenate(HFPolicy(half, tok).score(seqs, [m[1:] + [0] for m in masks]))
    assert np.abs(recorded - shifted).mean() > 10 * np.abs(recorded - same).mean()
