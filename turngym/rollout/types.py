"""Trajectory records: one :class:`Turn` per env step, one :class:`Episode` per reset.

Records are plain dataclasses that round-trip through JSON (one episode per JSONL line), so a
rollout saved today loads back losslessly for training or analysis tomorrow.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError

__all__ = ["DEFAULT_REWARD_RANGE", "Turn", "Episode", "group_id", "save_episodes", "load_episodes"]

DEFAULT_REWARD_RANGE: tuple[float, float] = (-1000.0, 1000.0)
"""Rewards (outcome and per turn) and signals that episodes from outside may carry: what the capture
proxy accepts in an outcome and what ``turngym train --episodes`` trains on (both configurable).
Wide for any sane scale, narrow enough that one reported reward cannot swamp its group: a reward of
1e308 made every other member's advantage zero."""


def group_id(env_id: str, seed: int | None, task_id: Any = None) -> str:
    """The id of the group of episodes that reset ``env_id`` with ``seed`` (and ``task_id``, if given).

    Episodes of a group share the task and the initial state, so every runner, tree and
    integration names groups with this one function: episodes played anywhere for the same
    seed land in the same group of the turn table. An episode's id is ``f"{group}/{index}"``.
    """
    group = f"{env_id or 'episode'}/{seed}"
    return group if task_id is None else f"{group}/{task_id}"


@dataclass
class Turn:
    """One turn: the action taken and what the env answered."""

    index: int
    action: str
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    signals: dict[str, float]
    state_key: str
    prev_state_key: str
    action_valid: bool = True
    invalid_reason: str | None = None
    infra_error: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None
    node: int = -1
    parent: int = -1
    allowed_token_ids: list[list[int]] | None = None
    """Per generated token, the ids constrained decoding allowed (None: decoded freely)."""
    policy_version: int | None = None
    """The policy version (updates applied) whose weights sampled this turn's tokens, when the
    policy reports it (``Action.meta["policy_version"]``, asynchronous training): ``logprobs``
    are that version's, the behaviour log-probs of the turn."""


@dataclass
class Episode:
    """A whole episode: its task, the first observation, its turns and its outcome."""

    episode_id: str
    env_id: str
    task_id: str
    seed: int | None
    initial_observation: str
    system_prompt: str = ""
    group: str = ""
    turns: list[Turn] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def success(self) -> bool:
        return bool(self.outcome.get("success", False))

    @property
    def infra_error(self) -> str | None:
        from_turns = next((t.infra_error for t in self.turns if t.infra_error), None)
        return from_turns or self.meta.get("infra_error")  # meta: the reset itself failed

    @property
    def finished(self) -> bool:
        return bool(self.turns) and (self.turns[-1].terminated or self.turns[-1].truncated)

    def context(
        self, upto: int | None = None, history: int | None = None
    ) -> tuple[list[dict[str, str]], list[list[int] | None]]:
        """What the policy sees before turn ``upto`` (default: the next turn).

        Returns the messages (system, first observation, then the last ``history`` turns as
        assistant/observation pairs; all turns when ``history`` is None) and, per assistant
        message, the generated token ids (None for turns without ids). The rollout engine and
        the training renderer both call this, so prompts and training samples agree.
        """
        n = len(self.turns) if upto is None else upto
        if history is not None and history < 1:
            raise ConfigError(f"history must be None (all turns) or >= 1, got {history}")
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        msgs.append({"role": "user", "content": self.initial_observation})
        ids: list[list[int] | None] = []
        for t in self.turns[(0 if history is None else max(0, n - history)) : n]:
            msgs.append({"role": "assistant", "content": t.action})
            msgs.append({"role": "user", "content": t.observation})
            ids.append(t.token_ids)
        return msgs, ids

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        data = dict(data)
        data["turns"] = [Turn(**t) for t in data.get("turns", [])]
        return cls(**data)


def save_episodes(episodes: Iterable[Episode], path: str | Path) -> int:
    """Write one JSON episode per line; returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for ep in episodes:
            fh.write(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n")
            n += 1
    return n


def load_episodes(path: str | Path) -> Iterator[Episode]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield Episode.from_dict(json.loads(line))
