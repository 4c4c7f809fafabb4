"""A naive retrieve-once baseline: search the question, answer with the top passage's first entity.

This is what a retrieval-augmented model without multi-turn search does at best, and what
the env must make insufficient: on one-hop questions the first name the top passage
mentions beyond the question is often the answer, but on multi-hop questions the top passage
is about the first hop, so its first new entity is a bridge entity, not the answer.

It reads only the observation text (like an agent would), never the task's gold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from turngym.envs.search.verifier import normalize_answer

__all__ = ["first_entity", "naive_answer", "naive_action", "NaiveRAGAgent"]

# A run of capitalised words (with "of"/"the" inside, e.g. "University of Tarn"), or a year.
_ENTITY = re.compile(r"\b[A-Z][\w'’-]*(?:\s+(?:of\s+|the\s+)?[A-Z][\w'’-]*)*|\b\d{3,4}\b")
_LEADING = {"The", "A", "An", "It", "Its", "In", "On", "She", "He", "They", "Her", "His", "Their", "For",
            "Founded", "Born", "Sometimes", "Critics", "Reviewers"}
_DOC = re.compile(r"Doc 1\(Title: [^)]*\)\s*(.*)")


def first_entity(text: str, exclude: str = "") -> str | None:
    """The first entity-like span of ``text`` that does not occur in ``exclude``.

    >>> first_entity("Orsa Vellamir was born in Port Tarn in 1921.", exclude="Where was Orsa Vellamir born?")
    'Port Tarn'
    """
    hay = f" {normalize_answer(exclude)} "
    for m in _ENTITY.finditer(text):
        words = m.group(0).split()
        while words and words[0] in _LEADING:
            words = words[1:]
        span = " ".join(words)
        if span and f" {normalize_answer(span)} " not in hay:
            return span
    return None


def naive_answer(question: str, observation: str) -> str:
    """The baseline's answer from the observation of its single search."""
    m = _DOC.search(observation)
    if m is None:
        return "unknown"
    return first_entity(m.group(1), exclude=question) or "unknown"


def naive_action(messages: Sequence[Mapping[str, str]]) -> str:
    """The baseline's next action from the conversation alone (no access to the env or gold).

    The first user message holds ``Question: …``; before any search the baseline searches the
    question verbatim, after it answers from the latest observation.

    >>> naive_action([{"role": "user", "content": "Question: Who founded Tarn Press?"}])
    '<search> Who founded Tarn Press? </search>'
    """
    users = [m["content"] for m in messages if m.get("role") == "user"]
    if not users:
        return "<answer> unknown </answer>"
    question = users[0].split("Question:", 1)[-1].strip()
    if len(users) == 1:
        return f"<search> {question} </search>"
    return f"<answer> {naive_answer(question, users[-1])} </answer>"


class NaiveRAGAgent:
    """Search the question once, answer with the top passage's first new entity.

    A non-privileged :class:`~turngym.agents.base.Policy`: it reads only the messages, so it
    runs anywhere a model would (``turngym eval turngym/SearchQA-v0 --agent naive-rag``).
    """

    name = "naive-rag"

    def act(self, batch: Sequence[Any]) -> list[Any]:
        from turngym.agents.base import Action

        return [Action(naive_action(inp.messages)) for inp in batch]
