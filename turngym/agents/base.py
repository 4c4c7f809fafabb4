"""The policy protocol: a batch of conversations in, a batch of actions out.

Every agent — scripted, HF transformers, vLLM, an OpenAI-compatible server — implements
:class:`Policy`. Policies that generate tokens fill :attr:`Action.token_ids` and
:attr:`Action.logprobs` with exactly what they sampled, so training can reuse the ids verbatim
instead of re-tokenizing decoded text: text re-encoded after decoding can tokenize differently,
and training on ids the policy never sampled biases the gradient.

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
        stop: the env's stop strings (``TurngymEnv.stop_strings``): a generating policy ends
            the action at the first one and keeps it in the text.
        action_token_ids: for each ``assistant`` message in ``messages``, in order, the token
            ids the policy generated for it (None where unknown, e.g. a scripted turn). Token
            policies put these ids verbatim into the next prompt instead of re-tokenizing the
            text, so the prompt a model saw is exactly what training renders
            (see :mod:`turngym.agents.render`).
        max_new_tokens: the env's token budget for one action (``env.max_new_tokens``), sized to
            its grammar; a generating policy uses it unless it was given its own limit. A short
            budget is what keeps a small model that rambles from costing ~100 tokens per turn.
        action_prefix: text every valid action of the env starts with (``env.action_prefix``,
            e.g. ``<`` for a tag grammar); a generating policy may force it (HF:
            ``force_action_prefix``). Empty when the grammar has no common start.
        choices: the complete set of valid actions this turn when the env can enumerate it
            (``env.action_choices()``, e.g. ALFWorld's admissible commands); None when it cannot.
            A generating policy may restrict its output to exactly one of them (HF:
            ``constrain_choices``); others ignore it.
    """

    messages: list[Message]
    env: Any = None
    episode_id: str = ""
    stop: tuple[str, ...] = ()
    action_token_ids: list[list[int] | None] = field(default_factory=list)
    max_new_tokens: int | None = None
    action_prefix: str = ""
    choices: tuple[str, ...] | None = None


@dataclass
class Action:
    """One action, with the tokens that produced it when the policy generates tokens.

    Attributes:
        text: the action text sent to ``env.step``.
        token_ids: the generated token ids, verbatim (None for scripted agents and servers
            that do not return them).
        logprobs: the sampling log-probability of each generated token.
        prompt_ids: the prompt token ids the model was conditioned on, when known.
        meta: backend facts (finish reason, latency, usage…). ``meta["infra_error"]`` set by
            a backend (server unreachable after retries) ends the episode unscored, never
            as a reward of 0.
        allowed_token_ids: under constrained decoding, per generated token the ids the decoder
            allowed at that step (``logprobs`` are then log-probs renormalized over them); None
            when every token was free. A trainer renormalizes its own log-probs over the same
            sets, so a constrained rollout stays on-policy.
    """

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    allowed_token_ids: list[list[int]] | None = None


@runtime_checkable
class Policy(Protocol):
    """Anything that maps a batch of :class:`AgentInput` to a batch of :class:`Action`.

    Optional attribute: ``privileged = True`` for agents that read ``AgentInput.env``
    (scripted agents); tree rollouts then restore each row's env state before asking them.
    """

    name: str

    def act(self, batch: Sequence[AgentInput]) -> list[Action]: ...
