"""vLLM backend (optional extra): exact token ids and log-probs from the offline engine."""

from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is an optional extra (pip install vllm on a GPU machine)")

import turngym  # noqa: E402
from turngym.agents import ChatRenderer, render_episode  # noqa: E402
from turngym.agents.vllm_backend import VLLMPolicy  # noqa: E402
from turngym.rollout import run_episodes  # noqa: E402


@pytest.fixture(scope="module")
def policy() -> VLLMPolicy:
    return VLLMPolicy.from_pretrained("tiny", max_new_tokens=12, seed=0, engine_kwargs={"enforce_eager": True})


def test_actions_carry_exact_ids_and_logprobs(policy: VLLMPolicy) -> None:
    [ep] = run_episodes(lambda: turngym.make("turngym/Math-v0", max_turns=3), policy, [0])
    renderer = ChatRenderer(policy.tokenizer)
    sample = render_episode(ep, renderer)
    for t in ep.turns:
        assert t.token_ids and len(t.logprobs) == len(t.token_ids)
        assert t.action == policy.tokenizer.decode(t.token_ids, skip_special_tokens=True)
        a, b = sample.turn_spans[t.index]
        assert sample.input_ids[a:b] == t.token_ids and sample.input_ids[:a] == t.prompt_ids


def test_stop_strings_stay_in_the_action(policy: VLLMPolicy) -> None:
    from turngym.agents import AgentInput

    actions = policy.act([AgentInput([{"role": "user", "content": "Say e"}], stop=("e",)) for _ in range(8)])
    stopped = [a for a in actions if a.meta["finish_reason"] == "stop"]
    assert stopped
    for a in stopped:  # the stop string is kept (the token that completed it may carry more)
        assert "e" in a.text and "e" not in policy.tokenizer.decode(a.token_ids[:-1], skip_special_tokens=True)
