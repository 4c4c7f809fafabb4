"""HF transformers backend: batching, stop strings, sampling controls, exact ids and log-probs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from turngym.agents import AgentInput, make_agent
from turngym.agents.hf import HFPolicy
from turngym.core.errors import ConfigError

PROMPTS = [
    [{"role": "user", "content": "Ava has 12 marbles. She buys 7 more."}],
    [{"role": "system", "content": "Solve."}, {"role": "user", "content": "What is 3 * 4?"}],
    [{"role": "user", "content": "Hugo has 5 crates with 20 apples in each. How many apples?"}],
]


@pytest.fixture(scope="module")
def greedy() -> HFPolicy:
    return HFPolicy.from_pretrained("tiny", temperature=0.0, max_new_tokens=10)


def test_batched_generation_equals_one_by_one(greedy: HFPolicy) -> None:
    # Different prompt lengths exercise left padding, position ids and cache compaction.
    batch = greedy.act([AgentInput(m, stop=("e",)) for m in PROMPTS])
    alone = [greedy.act([AgentInput(m, stop=("e",))])[0] for m in PROMPTS]
    assert [a.token_ids for a in batch] == [a.token_ids for a in alone]
    for a, b in zip(batch, alone, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_stop_strings_end_the_action_at_their_first_occurrence(greedy: HFPolicy) -> None:
    policy = HFPolicy(greedy.model, greedy.tokenizer, temperature=1.0, max_new_tokens=24, seed=1)
    actions = policy.act([AgentInput(PROMPTS[i % 3], stop=("e", "1")) for i in range(12)])
    stopped = [a for a in actions if a.meta["finish_reason"] == "stop"]
    assert stopped, "random text hits 'e' or '1' within 24 tokens"
    for a in stopped:
        assert a.meta["stop"] in a.text
        before = policy.tokenizer.decode(a.token_ids[:-1], skip_special_tokens=True)
        assert "e" not in before and "1" not in before  # it stopped at the first one
    for a in actions:
        assert a.text == policy.tokenizer.decode(a.token_ids, skip_special_tokens=True)
        assert len(a.token_ids) == len(a.logprobs) <= 24
        assert a.meta["finish_reason"] != "length" or len(a.token_ids) == 24


def test_sampling_is_seeded_and_logprobs_match_scores(greedy: HFPolicy) -> None:
    def run(seed: int):
        p = HFPolicy(greedy.model, greedy.tokenizer, temperature=1.0, max_new_tokens=8, seed=seed)
        return p, p.act([AgentInput(m) for m in PROMPTS])

    p, a = run(3)
    _, b = run(3)
    _, c = run(4)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]
    for x in a:
        seq = x.prompt_ids + x.token_ids
        [scores] = p.score([seq], [[0] * len(x.prompt_ids) + [1] * len(x.token_ids)])
        np.testing.assert_allclose(scores, x.logprobs, atol=1e-4)


def test_temperature_and_top_p_shape_the_distribution(greedy: HFPolicy) -> None:
    g = greedy.act([AgentInput(m) for m in PROMPTS])
    nucleus = HFPolicy(greedy.model, greedy.tokenizer, temperature=1.0, top_p=1e-6, max_new_tokens=10, seed=9)
    n = nucleus.act([AgentInput(m) for m in PROMPTS])
    assert [x.token_ids for x in n] == [x.token_ids for x in g]  # a tiny nucleus is the argmax
    hot = HFPolicy(greedy.model, greedy.tokenizer, temperature=2.0, max_new_tokens=10, seed=9)
    [h] = hot.act([AgentInput(PROMPTS[0])])
    seq = h.prompt_ids + h.token_ids
    [raw] = greedy.score([seq], [[0] * len(h.prompt_ids) + [1] * len(h.token_ids)])
    [scaled] = hot.score([seq], [[0] * len(h.prompt_ids) + [1] * len(h.token_ids)])
    np.testing.assert_allclose(scaled, h.logprobs, atol=1e-4)  # log-probs of the T=2 distribution
    assert not np.allclose(raw, h.logprobs)


def test_bad_settings_and_unknown_models_are_config_errors(greedy: HFPolicy) -> None:
    with pytest.raises(ConfigError, match="top_p"):
        HFPolicy(greedy.model, greedy.tokenizer, top_p=0.0)
    with pytest.raises(ConfigError, match="never downloads"):
        make_agent("hf:HuggingFaceTB/SmolLM2-135M")
    with pytest.raises(ConfigError, match="Did you mean hf"):
        make_agent("hff:tiny")


def test_importing_turngym_does_not_import_torch() -> None:
    code = (
        "import sys, turngym, turngym.agents, turngym.rollout, turngym.cli;"
        "from turngym.agents import make_agent; make_agent('oracle');"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_prefix_reuse_changes_nothing_but_speed(greedy: HFPolicy) -> None:
    import turngym
    from turngym.rollout import run_episodes, run_tree

    def make_env():
        return turngym.make("turngym/Math-v0", max_turns=3)

    def rollout(mb: int):
        policy = HFPolicy(greedy.model, greedy.tokenizer, temperature=0.0, max_new_tokens=8, prefix_cache_mb=mb)
        return policy, run_episodes(make_env, policy, [0, 1, 2])

    cold, a = rollout(0)
    warm, b = rollout(64)
    assert cold._prefix.hits == 0 and warm._prefix.hits == sum(len(e.turns) - 1 for e in b) > 0
    assert len(warm._prefix.entries) == len(b)  # consumed on reuse: one (the last) sequence per episode
    for x, y in zip(a, b, strict=True):
        assert [t.token_ids for t in x.turns] == [t.token_ids for t in y.turns]
        for t, u in zip(x.turns, y.turns, strict=True):
            np.testing.assert_allclose(t.logprobs, u.logprobs, atol=1e-4)
    sampler = HFPolicy(greedy.model, greedy.tokenizer, max_new_tokens=6, seed=0)
    tree = run_tree(make_env, sampler, [0], branching=(2, 2))
    non_root = {t.node for e in tree.episodes for t in e.turns if t.parent != -1}
    assert sampler._prefix.hits == len(non_root)  # every child reuses its parent's sequence
    for ep in tree.episodes:  # children reuse their own parent's cache: scores still match
        t = ep.turns[-1]
        [scores] = sampler.score([t.prompt_ids + t.token_ids], [[0] * len(t.prompt_ids) + [1] * len(t.token_ids)])
        np.testing.assert_allclose(scores, t.logprobs, atol=1e-4)


def test_prefix_cache_is_dropped_when_the_weights_change() -> None:
    import torch

    policy = HFPolicy.from_pretrained("tiny", temperature=0.0, max_new_tokens=4)
    prompt = policy.renderer.prompt_ids(PROMPTS[0])
    [first] = policy.generate([prompt])
    follow_up = prompt + first.token_ids + policy.renderer.encode("<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n")
    with torch.no_grad():
        next(policy.model.parameters()).mul_(1.5)  # what an optimizer step does
    [second] = policy.generate([follow_up], reusable=[len(prompt) + len(first.token_ids) - 1])
    assert policy._prefix.hits == 0  # the same call without the weight change would reuse the cache
    [scores] = policy.score([follow_up + second.token_ids], [[0] * len(follow_up) + [1] * len(second.token_ids)])
    np.testing.assert_allclose(scores, second.logprobs, atol=1e-4)  # computed with the new weights
