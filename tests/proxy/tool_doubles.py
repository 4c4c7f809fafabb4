"""Test doubles and helpers shared by the tool-calling proxy tests.

:class:`ScriptedCallsPolicy` is the tiny model's real :class:`~turngym.agents.hf.HFPolicy` whose
replies follow a script: a reply's text is *fed* through the model (``generate``'s ``forced``
ids, as ``tool_choice: required`` feeds a call's opening), so the proxy records the script's ids
with the model's own log-probs for them. The untrained tiny model writes no parseable call by
itself; the script lets the real frameworks see real calls while everything else — rendering,
parsing, capture, training — runs unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import turngym

STORE_SEED = 0


class ScriptedCallsPolicy:
    """Test double: ``policy`` whose continuation of a prompt is ``script(prompt_text)`` (None: sample freely).

    The scripted text must start with what the proxy forces (a call's opening); its ids follow
    the forced ids, then the end-of-turn token.
    """

    def __init__(self, policy: Any, script: Callable[[str], str | None]) -> None:
        self._policy, self._script = policy, script

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def generate(self, prompts: Sequence[Sequence[int]], stops: Any = None, reusable: Any = None,
                 max_new_tokens: Sequence[int] | None = None, forced: Sequence[Sequence[int]] | None = None,
                 tries: Any = None) -> Any:
        p = self._policy
        feed = [list(f) for f in (forced or [[]] * len(prompts))]
        limits = list(max_new_tokens or [64] * len(prompts))
        for i, prompt in enumerate(prompts):
            text = self._script(p.tokenizer.decode(prompt))
            if text is None:
                continue
            head = p.tokenizer.decode(feed[i])
            assert text.startswith(head), f"the script's reply {text!r} does not start with the forced {head!r}"
            feed[i] = feed[i] + p.renderer.encode(text[len(head):]) + [p.end_id]
            limits[i] = max(limits[i], len(feed[i]))
        return p.generate(prompts, stops, reusable, limits, feed, tries)


def store_env() -> tuple[Any, str, list[dict[str, Any]]]:
    """Tools-v0's store task ``STORE_SEED``: the env, the user's request (the ``<tools>`` block left
    out: the tools travel as native tool schemas) and the tools in OpenAI format."""
    env = turngym.make("turngym/Tools-v0", sources=["store"])
    obs, _ = env.reset(seed=STORE_SEED)
    request = obs.split("</tools>")[-1].strip().removeprefix("User:").strip()
    return env, request, list(env.unwrapped.tools)


def store_facts(request: str) -> dict[str, str]:
    """The email, order id and address the seed's user asks about (what a scripted agent would read)."""
    email = re.search(r"[\w.]+@[\w.]+\w", request)
    order = re.search(r"\bO\d+\b", request)
    address = re.search(r"to (.+?) instead", request)
    assert email and order and address, request
    return {"email": email.group(0), "order_id": order.group(0), "address": address.group(1)}


def env_call(env: Any, name: str, arguments: dict[str, Any]) -> str:
    """Run one tool call in the env (its JSON action grammar); the observation is the tool's result."""
    obs, _, _, _, _ = env.step(json.dumps([{"name": name, "arguments": arguments}]))
    return obs


def assistant_turns(prompt_text: str) -> int:
    """How many assistant turns a ChatML prompt already holds (the generation prompt not counted)."""
    return prompt_text.count("<|im_start|>assistant") - 1
