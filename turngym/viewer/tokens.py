"""The training sample of one episode, token by token, as the trainer builds it.

The trainer renders an episode with :func:`~turngym.agents.render.render_episode` (generated ids
spliced in verbatim, a mask over the policy's tokens) and spreads each turn's advantage over its
action span with :func:`~turngym.trainers.batch.token_advantages`. This module calls those same
two functions, so what the Tokens page shows *is* the sample the loss sees, not a re-tokenization.

Decoding needs the run's tokenizer. A ``turngym train`` run directory holds it next to the weights
(``warm_start/``, ``checkpoints/…``); it is found, loaded once on first use and cached. Without one
the page shows raw ids; an episode without generated ids (a scripted or oracle agent) has no
tokens to show at all, and the page says so instead of tokenizing its text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turngym.rollout.types import Episode

__all__ = ["TokenView", "find_tokenizer_dir", "token_view"]

_TOKENIZER_FILES = ("tokenizer_config.json",)


@dataclass
class TokenView:
    """Per-token facts of one episode's training sample.

    Attributes:
        ids: the token ids.
        mask: the loss mask (1 = a policy token the loss trains on).
        advantages: per token, the advantage the loss multiplies it by (0 off the mask).
        logprobs: per token, the sampling log-prob when the rollout recorded it, else None.
        turns: per token, the turn whose action span holds it (-1 for prompt/env/template tokens).
        pieces: the decoded text of each token, or None without a tokenizer.
        rendered: True when this is the full rendered sample (template and observations included);
            False when only the generated ids of each turn are known (no tokenizer).
    """

    ids: list[int]
    mask: list[int]
    advantages: list[float]
    logprobs: list[float | None]
    turns: list[int]
    pieces: list[str] | None
    rendered: bool


def find_tokenizer_dir(root: Path, max_depth: int = 3) -> Path | None:
    """The first directory under ``root`` (breadth first, sorted) that holds a saved tokenizer."""
    base = root if root.is_dir() else root.parent
    level = [base]
    for _ in range(max_depth + 1):
        nxt: list[Path] = []
        for d in level:
            if all((d / f).is_file() for f in _TOKENIZER_FILES):
                return d
            try:
                nxt.extend(sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")))
            except OSError:
                continue
        level = nxt
    return None


def has_token_ids(ep: Episode) -> bool:
    return any(t.token_ids is not None for t in ep.turns)


def token_view(ep: Episode, turn_advantages: Sequence[float], renderer: Any | None) -> TokenView:
    """The sample of ``ep`` (it must carry generated ids) with ``turn_advantages`` spread on it.

    With a :class:`~turngym.agents.render.ChatRenderer` this is exactly the trainer's sample;
    without one, the concatenated generated ids of every turn (all under the mask).
    """
    adv = [0.0 if math.isnan(float(a)) else float(a) for a in turn_advantages]
    if renderer is not None:
        from turngym.agents.render import render_episode
        from turngym.trainers.batch import token_advantages

        sample = render_episode(ep, renderer)
        tok_adv = token_advantages(sample, adv)
        turns = [-1] * len(sample.input_ids)
        logp: list[float | None] = [None] * len(sample.input_ids)
        for t in ep.turns:
            start, end = sample.turn_spans[t.index]
            turns[start:end] = [t.index] * (end - start)
            if t.logprobs is not None and t.token_ids is not None:
                logp[start:end] = list(sample.logprobs[start:end])
        pieces = [renderer.tokenizer.decode([i]) for i in sample.input_ids]
        return TokenView(list(sample.input_ids), list(sample.loss_mask), tok_adv, logp, turns, pieces, True)
    ids: list[int] = []
    turns = []
    logp = []
    for t in ep.turns:
        gen = list(t.token_ids or [])
        ids += gen
        turns += [t.index] * len(gen)
        logp += list(t.logprobs) if t.logprobs is not None and len(t.logprobs) == len(gen) else [None] * len(gen)
    return TokenView(ids, [1] * len(ids), [adv[t] for t in turns], logp, turns, None, False)
