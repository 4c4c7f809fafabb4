"""Information gain: batched teacher-forced scoring of the gold answer, per turn."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from turngym.rewards import InfoGainScorer, answer_logprobs, episode_histories, information_gain  # noqa: E402
from turngym.rollout.types import Episode, Turn  # noqa: E402


class CharTokenizer:
    """Test double: one token per character (no chat template: plain rendering is used)."""

    chat_template = None
    pad_token_id = 0

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [1 + (ord(c) % 95) for c in text]


class CopyLM(torch.nn.Module):
    """Test double LM: strongly predicts any token that already appeared in its context."""

    def __init__(self, vocab: int = 96) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(4.0))
        self.vocab = vocab

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0):  # noqa: ANN001, ANN201
        seen = torch.nn.functional.one_hot(input_ids, self.vocab).float()
        if attention_mask is not None:
            seen = seen * attention_mask.unsqueeze(-1)
        logits = self.scale * (seen.cumsum(1) > 0).float()
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return transformers.modeling_outputs.CausalLMOutput(logits=logits)


def _episode(observations: list[str]) -> Episode:
    turns = [
        Turn(index=i, action=f"<search>q{i}</search>", observation=o, reward=0.0, terminated=i == len(observations) - 1,
             truncated=False, signals={}, state_key=str(i + 1), prev_state_key=str(i))
        for i, o in enumerate(observations)
    ]
    return Episode(episode_id="e", env_id="x", task_id="t", seed=0, initial_observation="Who wrote it?", turns=turns)


def _tiny_gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=96, n_positions=512, n_embd=32, n_layer=2, n_head=2)
    return transformers.GPT2LMHeadModel(cfg).eval()


def test_batched_scores_equal_one_at_a_time_and_are_length_normalized() -> None:
    model = _tiny_gpt2()
    rng = np.random.default_rng(0)
    contexts = [rng.integers(1, 96, int(rng.integers(1, 40))).tolist() for _ in range(9)]
    answers = [rng.integers(1, 96, int(rng.integers(1, 6))).tolist() for _ in range(9)]
    batched = answer_logprobs(model, contexts, answers, batch_size=4)
    for c, a, got in zip(contexts, answers, batched):
        ids = torch.tensor([c + a])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
        want = np.mean([logp[len(c) - 1 + j, a[j]].item() for j in range(len(a))])
        assert got == pytest.approx(want, abs=1e-4)


def test_information_gain_is_positive_on_the_turn_that_reveals_the_answer() -> None:
    ep = _episode(["no idea", "it was written by ZQX", "ok"])
    assert len(episode_histories(ep)) == 4
    [ig] = information_gain(CopyLM(), CharTokenizer(), [ep], ["ZQX"], answer_template="{gold}", space="logprob")
    assert ig.shape == (3,)
    assert ig[1] > 2.0  # the observation of turn 1 contains the gold answer: log-odds jump ≈ 4
    assert abs(ig[0]) < 0.5 and abs(ig[2]) < 0.5
    [p] = information_gain(CopyLM(), CharTokenizer(), [ep], ["ZQX"], answer_template="{gold}")
    assert p[1] > 0 and p[1] > 5 * max(abs(p[0]), abs(p[2]))


def test_scores_in_prob_and_logprob_space_agree() -> None:
    eps = [_episode(["a", "b"]), _episode(["ZQX here", "c"])]
    prob = InfoGainScorer(CopyLM(), CharTokenizer(), answer_template="{gold}", batch_size=3)
    logp = InfoGainScorer(CopyLM(), CharTokenizer(), answer_template="{gold}", space="logprob")
    hist = [h for ep in eps for h in episode_histories(ep)]
    golds = ["ZQX"] * len(hist)
    np.testing.assert_allclose(prob.scores(hist, golds), np.exp(logp.scores(hist, golds)), rtol=1e-6)


def test_bad_options_raise() -> None:
    from turngym.core.errors import ConfigError

    with pytest.raises(ConfigError, match="gold"):
        InfoGainScorer(CopyLM(), CharTokenizer(), answer_template="no placeholder")
    with pytest.raises(ConfigError, match="gold answers"):
        information_gain(CopyLM(), CharTokenizer(), [_episode(["a"])], [])
