"""Saved episodes as RL training data (``TrainConfig.episodes``, ``turngym train --episodes``).

Episodes captured by :mod:`turngym.proxy` from a user's own agent — or saved by any rollout of a
token policy — carry each turn's sampled ids and log-probs, which is all an on-policy update
needs from a rollout. This module loads them for :class:`~turngym.trainers.loop.Trainer` and
refuses, with the fix, what cannot be trained on: turns without sampled ids or log-probs, ids
from another tokenizer (the proxy stamps a fingerprint of it), episodes of several envs in one
run. Episodes that ended in an infrastructure error are left out (never scored).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError
from turngym.core.spec import RewardSpec
from turngym.rollout.types import Episode, load_episodes

__all__ = ["load_training_episodes", "reward_spec_of"]


def load_training_episodes(path: str | Path, tokenizer: Any | None = None, model: Any | None = None) -> list[Episode]:
    """The trainable episodes in ``path`` (a JSONL file, or a directory with ``episodes.jsonl``).

    ``tokenizer``, ``model``: the trainer's; episodes stamped with another tokenizer's fingerprint
    (``meta["tokenizer"]``: their ids mean other tokens) or another architecture's
    (``meta["architecture"]``: their log-probs are another model's) are refused.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "episodes.jsonl"
    if not file.is_file():
        raise ConfigError(f"no saved episodes at {path}: pass a JSONL file or a directory holding episodes.jsonl "
                          "(turngym proxy --out DIR writes DIR/episodes.jsonl)")
    try:
        episodes = list(load_episodes(file))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{file} is not a file of turngym episodes ({exc})") from None
    kept = [ep for ep in episodes if ep.turns and not ep.infra_error]
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
        for t in ep.turns:
            if t.token_ids is None or t.logprobs is None:
                raise ConfigError(f"turn {t.index} of episode {ep.episode_id!r} has no sampled token ids or log-probs: RL needs "
                                  "episodes sampled by a token policy (turngym proxy, or an hf/vllm agent)")
    env_ids = sorted({ep.env_id for ep in kept})
    if len(env_ids) > 1:
        raise ConfigError(f"the episodes come from several envs {env_ids}: their rewards are shaped by different specs; "
                          "train on one env's episodes at a time")
    return kept


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
