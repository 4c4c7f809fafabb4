"""Information gain of each turn: how much it raised the policy's belief in the gold answer.

IGPO (Wang et al., 2025, arXiv 2510.14967) treats every turn of an agent as acquiring
information about the ground truth: with ``p_k`` the policy's probability of producing the gold
answer after the first ``k`` turns of the episode,

    p_k = exp( mean_j log π(a_j | history_≤k, a_<j) )        (teacher-forced, length-normalized)
    IG_t = p_{t+1} − p_t                                      (turn t = 0 … T−1)

so a search that retrieves the answer's evidence earns a positive reward and a useless turn
earns ~0, whatever the outcome. ``space="logprob"`` uses the length-normalized log-probability
itself instead of ``p`` (unbounded, more sensitive when ``p`` is tiny).

Works with any Hugging Face causal LM (anything called as
``model(input_ids=..., attention_mask=..., position_ids=...)`` returning ``.logits``) and its
tokenizer. Scoring is batched: every (history, answer) pair of every episode goes through
the model in left-padded batches, keeping only the logits of the answer positions.
torch is imported when scoring, never by ``import turngym.rewards``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from turngym.core.errors import ConfigError

__all__ = ["InfoGainScorer", "answer_logprobs", "episode_histories", "information_gain"]

Message = dict[str, str]


def answer_logprobs(
    model: Any,
    contexts: Sequence[Sequence[int]],
    answers: Sequence[Sequence[int]],
    *,
    pad_id: int = 0,
    batch_size: int = 16,
) -> np.ndarray:
    """Length-normalized log-probability of each answer given its context (teacher-forced).

    ``mean_j log π(answer_j | context, answer_<j)`` for every pair, in input order. Pairs are
    sorted by length and left-padded into batches (explicit ``position_ids``, so padding does
    not move positions); only the answer positions' logits are materialized when the model
    supports ``logits_to_keep``.
    """
    import torch

    if len(contexts) != len(answers):
        raise ConfigError(f"{len(contexts)} contexts for {len(answers)} answers")
    if any(len(a) == 0 for a in answers):
        raise ConfigError("an answer encodes to zero tokens; nothing to score")
    if any(len(c) == 0 for c in contexts):
        raise ConfigError("a context is empty; the first answer token needs something to condition on")
    device = next(model.parameters()).device
    out = np.empty(len(contexts))
    order = np.argsort([len(c) + len(a) for c, a in zip(contexts, answers)], kind="stable")
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        seqs = [list(contexts[i]) + list(answers[i]) for i in idx]
        width = max(map(len, seqs))
        keep = max(len(answers[i]) for i in idx) + 1
        ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
        with torch.inference_mode():
            try:
                logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
            except TypeError:  # older models: no logits_to_keep
                logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
            logits = logits[:, -keep:-1].float()  # predictions for the last keep-1 tokens
            logp = torch.log_softmax(logits, dim=-1)
            targets = ids[:, width - keep + 1 :]
            token_lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        n_ans = torch.tensor([len(answers[i]) for i in idx], device=device)
        pos = torch.arange(keep - 1, device=device).unsqueeze(0)
        in_answer = pos >= (keep - 1 - n_ans).unsqueeze(1)
        out[idx] = ((token_lp * in_answer).sum(-1) / n_ans).cpu().numpy()
    return out


def episode_histories(episode: Any) -> list[list[Message]]:
    """The conversation after 0, 1, …, T turns of a rollout episode (T + 1 histories).

    History ``k`` holds the system prompt, the first observation and the first ``k``
    (action, observation) pairs; the observation after the final turn (the verdict) is left out.
    """
    base: list[Message] = [{"role": "system", "content": episode.system_prompt}] if episode.system_prompt else []
    base.append({"role": "user", "content": episode.initial_observation})
    histories = [list(base)]
    msgs = list(base)
    last = len(episode.turns) - 1
    for i, t in enumerate(episode.turns):
        msgs.append({"role": "assistant", "content": t.action})
        if i < last:
            msgs.append({"role": "user", "content": t.observation})
        histories.append(list(msgs))
    return histories


@dataclass
class InfoGainScorer:
    """Scores a policy's belief in gold answers after each turn, for any HF causal LM.

    Attributes:
        model: the policy (a ``transformers`` causal LM, or anything with the same call).
        tokenizer: its tokenizer; its chat template renders histories when it has one.
        answer_template: how the gold answer is written as the policy's next message.
        space: ``"prob"`` (IGPO: differences of ``exp`` of the mean log-prob) or ``"logprob"``.
        batch_size: (history, answer) pairs per forward pass.
    """

    model: Any
    tokenizer: Any
    answer_template: str = "<answer>{gold}</answer>"
    space: Literal["prob", "logprob"] = "prob"
    batch_size: int = 16

    def __post_init__(self) -> None:
        if self.space not in ("prob", "logprob"):
            raise ConfigError(f"space must be 'prob' or 'logprob', got {self.space!r}")
        if "{gold}" not in self.answer_template:
            raise ConfigError(f"answer_template must contain '{{gold}}', got {self.answer_template!r}")

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def context_ids(self, messages: Sequence[Message]) -> list[int]:
        """Token ids of a history followed by the start of the policy's next message."""
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        else:
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return self._encode(text)

    def scores(self, histories: Sequence[Sequence[Message]], golds: Sequence[str]) -> np.ndarray:
        """Belief in each gold answer after each history (``p`` or mean log-prob)."""
        contexts = [self.context_ids(h) for h in histories]
        answers = [self._encode(self.answer_template.format(gold=g)) for g in golds]
        pad = getattr(self.tokenizer, "pad_token_id", None)
        lp = answer_logprobs(self.model, contexts, answers, pad_id=pad if pad is not None else 0, batch_size=self.batch_size)
        return np.exp(lp) if self.space == "prob" else lp

    def episode_gains(self, episodes: Sequence[Any], golds: Sequence[str]) -> list[np.ndarray]:
        """Per-turn information gain of each episode (one array of length T per episode)."""
        if len(episodes) != len(golds):
            raise ConfigError(f"{len(golds)} gold answers for {len(episodes)} episodes")
        histories, owners = [], []
        for e, ep in enumerate(episodes):
            for h in episode_histories(ep):
                histories.append(h)
                owners.append(e)
        s = self.scores(histories, [golds[e] for e in owners])
        owners_arr = np.asarray(owners)
        return [np.diff(s[owners_arr == e]) for e in range(len(episodes))]


def information_gain(model: Any, tokenizer: Any, episodes: Sequence[Any], golds: Sequence[str], **options: Any) -> list[np.ndarray]:
    """``IG_t`` for every turn of every episode; see :class:`InfoGainScorer` for ``options``."""
    return InfoGainScorer(model, tokenizer, **options).episode_gains(episodes, golds)
