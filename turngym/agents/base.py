"""The policy protocol: a batch of conversations in, a batch of actions out.

Every agent — scripted, HF transformers, vLLM, an OpenAI-compatible server — implements
:class:`Policy`. Policies that generate tokens fill :attr:`Action.token_ids` and
:attr:`Action.logprobs` with exactly what they sampled, so training can reuse the ids verbatim
instead of re-tokenizing decoded text (see DESIGN.md, token faithfulness).

Scripted agents (oracle, random) are *privileged*: they read the env itself through
:attr:`AgentInput.env`. Model agents only ever see the messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Message", "AgentInput", "Action", "Policy"]

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


@dataclass
class AgentInput:
    """What a policy sees for one env at one turn.

    Attributes:
        messages: the conversation so far: system prompt, then observations (``user``) and
            the agent's earlier actions (``assistant``), ending with the latest observation.
        env: the env itself, for privileged scripted agents only.
        episode_id: a stable id of the episode (lets stateful agents keep per-episode memory).
    """

    messages: list[Message]
    env: Any = None
    episode_id: str = ""


@dataclass
class Action:
    """One action, with the tokens that produced it when the policy generates tokens.

    Attributes:
        text: the action text sent to ``env.step``.
        token_ids: the generated token ids, verbatim (None for scripted agents and servers
            that do not return them).
        logprobs: the sampling log-probability of each generated token.
        prompt_ids: the prompt token ids the model was conditioned on, when known.
        meta: backend facts (finish reason, latency, usage…).
    """

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Policy(Protocol):
    """Anything that maps a batch of :class:`AgentInput` to a batch of :class:`Action`."""

    name: str

    def act(self, batch: Sequence[AgentInput]) -> list[Action]: ...
