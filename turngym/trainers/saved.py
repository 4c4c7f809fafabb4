"""Saved episodes as RL training data (``TrainConfig.episodes``, ``turngym train --episodes``).

Episodes captured by :mod:`turngym.proxy` from a user's own agent — or saved by any rollout of a
token policy — carry each turn's sampled ids and log-probs, which is all an on-policy update
needs from a rollout. This module loads them for :class:`~turngym.trainers.loop.Trainer` and
refuses, with the fix, what cannot be trained on: turns without sampled ids or log-probs, ids
from another tokenizer (the proxy stamps a fingerprint of it), episodes of several envs in one
run. Episodes that ended in an infrastructure error are left out (never scored).

A saved file is input from outside the trainer (any client of the proxy wrote parts of it), so
every record is checked before the first step (:func:`record_problem`): a NaN log-prob trained
every LoRA tensor to NaN, an id past the vocabulary was an IndexError in the middle of a run,
one reward of 1e308 zeroed its whole group's signal. A bad record is refused with its episode id
and reason, or left out and counted (``skip_bad``, ``turngym train --skip-bad-episodes``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError
from turngym.core.spec import RewardSpec
from turngym.rollout.types import DEFAULT_REWARD_RANGE, Episode, Turn, load_episodes

__all__ = ["BadRecord", "SavedEpisodes", "load_training_data", "load_training_episodes", "record_problem", "reward_spec_of", "vocab_size"]

#: The lowest log-prob a sampled token can have had: float32 probabilities end near e^-104, so a
#: recorded value below this was not sampled (and its importance ratio would overflow).
MIN_LOGPROB = -1000.0
# Slack above 0 for a log-prob rounded up by float arithmetic.
_LOGPROB_SLACK = 1e-4


@dataclass(frozen=True)
class BadRecord:
    """A saved episode that cannot be trained on, and why (the first problem found)."""

    episode_id: str
    reason: str


@dataclass
class SavedEpisodes:
    """The trainable episodes of a file and the records left out by ``skip_bad``."""

    episodes: list[Episode]
    skipped: list[BadRecord] = field(default_factory=list)


def _ids_problem(ids: Any, what: str, vocab_size: int | None) -> str | None:
    if not isinstance(ids, list):
        return f"its {what} are not a list of token ids"
    for k, i in enumerate(ids):
        if type(i) is not int:  # bool and float ids are not token ids either
            return f"its {what}[{k}] = {i!r} is not an integer token id"
        if i < 0 or (vocab_size is not None and i >= vocab_size):
            bound = f"[0, {vocab_size})" if vocab_size is not None else ">= 0"
            return f"its {what}[{k}] = {i} is outside the vocabulary {bound}"
    return None


def _reward_problem(value: Any, what: str, reward_range: tuple[float, float]) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{what} {value!r} is not a number"
    low, high = reward_range
    if not math.isfinite(value):
        return f"{what} {value} is not finite"
    if not low <= value <= high:
        return f"{what} {value} is outside the declared reward range [{low:g}, {high:g}] (set reward_range to widen it)"
    return None


def _shape_problem(ep: Episode) -> str | None:
    """Fields of the wrong JSON type (a list for a mapping, say): refused like any bad record, not an
    AttributeError or TypeError in the middle of the checks."""
    for name, value, kind in (("episode_id", ep.episode_id, str), ("env_id", ep.env_id, str),
                              ("outcome", ep.outcome, dict)):
        if not isinstance(value, kind):
            return f"its {name} {value!r} is not a {'string' if kind is str else 'mapping'}"
    for turn in ep.turns:
        if not isinstance(turn.signals or {}, dict):
            return f"turn {turn.index}: its signals {turn.signals!r} are not a mapping"
        if not isinstance(turn.allowed_token_ids or [], list):
            return f"turn {turn.index}: its allowed_token_ids {turn.allowed_token_ids!r} are not a list"
    return None


def _turn_problem(turn: Turn, vocab_size: int | None, reward_range: tuple[float, float]) -> str | None:
    where = f"turn {turn.index}"
    if turn.token_ids is None or turn.logprobs is None:
        return (f"{where} has no sampled token ids or log-probs: RL needs episodes sampled by a token policy "
                "(turngym proxy, or an hf/vllm agent)")
    for ids, what in ((turn.token_ids, "token_ids"), (turn.prompt_ids, "prompt_ids")):
        problem = None if ids is None else _ids_problem(ids, what, vocab_size)
        if problem:
            return f"{where}: {problem}"
    for k, allowed in enumerate(turn.allowed_token_ids or []):
        problem = _ids_problem(allowed, f"allowed_token_ids[{k}]", vocab_size)
        if problem:
            return f"{where}: {problem}"
    if not isinstance(turn.logprobs, list) or len(turn.logprobs) != len(turn.token_ids):
        n = len(turn.logprobs) if isinstance(turn.logprobs, list) else turn.logprobs
        return f"{where} has {n} log-probs for {len(turn.token_ids)} sampled ids"
    for k, lp in enumerate(turn.logprobs):
        if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not math.isfinite(lp):
            return f"{where}: its log-prob {k} is {lp!r}, not a finite number"
        if not MIN_LOGPROB <= lp <= _LOGPROB_SLACK:
            return f"{where}: its log-prob {k} is {lp}, not a sampled token's (a log-prob is in [{MIN_LOGPROB:g}, 0])"
    problem = _reward_problem(turn.reward, f"{where}: its reward", reward_range)
    if problem:
        return problem
    for name, value in (turn.signals or {}).items():
        problem = _reward_problem(value, f"{where}: its signal {name!r}", reward_range)
        if problem:
            return problem
    return None


def _extends_problem(ep: Episode) -> str | None:
    """Each turn's prompt extends the previous turn's prompt + sampled ids (the capture format)."""
    before: list[int] = []
    for turn in ep.turns:
        if turn.prompt_ids is None:
            return f"turn {turn.index} of a recorded episode has no prompt_ids"
        if turn.prompt_ids[: len(before)] != before:
            return (f"turn {turn.index}: its prompt does not extend the previous turn's prompt + sampled ids (a recorded "
                    "episode is one token sequence; an edited history is a new episode)")
        before = list(turn.prompt_ids) + list(turn.token_ids or [])
    return None


def record_problem(ep: Episode, *, vocab_size: int | None = None, reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE,
                   renderer: Any = None) -> str | None:
    """Why ``ep`` cannot be trained on (None: it can): checked before the first step, so a bad record
    never reaches the update (a NaN log-prob trained every LoRA tensor to NaN; an id past the
    vocabulary was an IndexError mid-run; a reward of 1e308 zeroed its group's signal).

    ``vocab_size``: the model's (embedding rows); ``renderer``: the trainer's
    :class:`~turngym.agents.render.ChatRenderer`, to render episodes that are not recorded.
    """
    from turngym.agents.render import RECORDED, RenderError, render_episode

    problem = _shape_problem(ep)
    if problem:
        return problem
    for turn in ep.turns:
        problem = _turn_problem(turn, vocab_size, reward_range)
        if problem:
            return problem
    if "reward" in ep.outcome:
        problem = _reward_problem(ep.outcome["reward"], "its outcome reward", reward_range)
        if problem:
            return problem
    if ep.meta.get("rendering") == RECORDED:
        return _extends_problem(ep)
    if renderer is not None:
        try:
            render_episode(ep, renderer)
        except RenderError as exc:
            return f"it cannot be rendered for training ({exc})"
    return None


def load_training_data(path: str | Path, tokenizer: Any | None = None, model: Any | None = None, *,
                       reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE, skip_bad: bool = False,
                       renderer: Any = None) -> SavedEpisodes:
    """The trainable episodes in ``path`` (a JSONL file, or a directory with ``episodes.jsonl``).

    ``tokenizer``, ``model``: the trainer's; episodes stamped with another tokenizer's fingerprint
    (``meta["tokenizer"]``: their ids mean other tokens) or another architecture's
    (``meta["architecture"]``: their log-probs are another model's) are refused. Every record is
    then checked (:func:`record_problem`: token ids inside ``model``'s vocabulary, finite
    log-probs, prompts that extend, rewards in ``reward_range``): the first bad one is refused
    with its episode id and reason, or, with ``skip_bad``, every bad one is left out and listed
    in :attr:`SavedEpisodes.skipped`.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "episodes.jsonl"
    if not file.is_file():
        raise ConfigError(f"no saved episodes at {path}: pass a JSONL file or a directory holding episodes.jsonl "
                          "(turngym proxy --out DIR writes DIR/episodes.jsonl)")
    try:
        episodes = list(load_episodes(file))
        kept = [ep for ep in episodes if ep.turns and not ep.infra_error]  # reads meta: a non-mapping fails here
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise ConfigError(f"{file} is not a file of turngym episodes ({type(exc).__name__}: {exc})") from None
    if not kept:
        raise ConfigError(f"{file} holds no episode to train on ({len(episodes)} episodes, none with turns and without an "
                          "infrastructure error): report outcomes to the proxy so its episodes are written")
    from turngym.proxy.service import model_fingerprint, tokenizer_fingerprint

    fingerprint = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
    arch = model_fingerprint(model) if model is not None else None
    for ep in kept:
        stamp, stamp_arch = ep.meta.get("tokenizer"), ep.meta.get("architecture")
        if fingerprint is not None and stamp is not None and stamp != fingerprint:
            raise ConfigError(f"episode {ep.episode_id!r} was sampled with another tokenizer (model {ep.meta.get('model')!r}); "
                              "train the model that served it (--model)")
        if arch is not None and stamp_arch is not None and stamp_arch != arch:
            raise ConfigError(f"episode {ep.episode_id!r} was sampled by a model of another architecture (served as "
                              f"{ep.meta.get('model')!r}): train the model that served it (--model; the proxy's 'tiny' is "
                              "TrainConfig's model='tiny' with tiny_model={})")
    vocab = vocab_size(model) if model is not None else None
    good, skipped = [], []
    for ep in kept:
        problem = record_problem(ep, vocab_size=vocab, reward_range=reward_range, renderer=renderer)
        if problem is None:
            good.append(ep)
        elif skip_bad:
            skipped.append(BadRecord(ep.episode_id, problem))
        else:
            raise ConfigError(f"episode {ep.episode_id!r} in {file} cannot be trained on: {problem}. Fix or remove the record, "
                              "or pass --skip-bad-episodes (skip_bad_episodes=True) to train on the others")
    if not good:
        raise ConfigError(f"every one of the {len(kept)} trainable-looking episodes in {file} failed its checks (the first, "
                          f"{skipped[0].episode_id!r}: {skipped[0].reason}): nothing is left to train on")
    env_ids = sorted({ep.env_id for ep in good})
    if len(env_ids) > 1:
        raise ConfigError(f"the episodes come from several envs {env_ids}: their rewards are shaped by different specs; "
                          "train on one env's episodes at a time")
    return SavedEpisodes(good, skipped)


def load_training_episodes(path: str | Path, tokenizer: Any | None = None, model: Any | None = None, **checks: Any) -> list[Episode]:
    """:func:`load_training_data`'s episodes (a bad record refused unless ``skip_bad=True``)."""
    return load_training_data(path, tokenizer, model, **checks).episodes


def vocab_size(model: Any) -> int:
    """The ids ``model`` can read and score: its embedding rows (and its head's outputs, if fewer)."""
    rows = int(model.get_input_embeddings().num_embeddings)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out = getattr(head, "out_features", None)
    return min(rows, int(out)) if out is not None else rows


def reward_spec_of(episodes: Sequence[Episode]) -> RewardSpec:
    """The reward spec of the episodes' env when it is registered; otherwise a spec without
    signals (the reported rewards pass through unshaped)."""
    from turngym.core.errors import UnknownEnvError
    from turngym.core.registry import env_info, load_entry_point

    try:
        info = env_info(episodes[0].env_id)
    except UnknownEnvError:  # not a registered env ("proxy", or the user's own): rewards as reported
        return RewardSpec(signals=(), outcome="the outcome reward reported by the client")
    return load_entry_point(info.entry_point).reward_spec
