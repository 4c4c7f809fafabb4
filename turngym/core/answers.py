"""Grading facts in free text, bounded: a reply may not name every candidate and collect the credit.

An env that asks for a fact ("who is the highest-paid employee in Riverton?", "what did order O1003
cost?") grades the reply by whether the fact *appears* in it (case-insensitive, numbers by value).
Appearing is cheap: a reply listing all 140 first x last names of the generator, or every number
from 0 to 99, contains any name or count. An agent paid for answers learns to hedge that way, so
the rule here is one for numbers and text alike:

* every answer has a **kind**: numbers are one kind; a text answer's kind is the env's vocabulary
  that holds it (all employee names, all order statuses) -- an answer in no vocabulary is a kind
  of its own;
* the reply's **candidates** of a kind are the distinct members it mentions (every distinct number;
  every vocabulary entry found as a substring, by the same rule that credits an answer), minus the
  ones the user's own request mentions (context the user gave is not a guess: "order O1003 cost
  45.50") -- unless the request mentions an answer itself (a choice: "Paris or Rome?"), where
  restating the request would name the answer for free, so nothing is excused;
* a reply naming more candidates of a kind than that kind has answers, plus a slack, gets no
  credit for that kind: all its answers count as missing. The slack is :data:`ANSWER_SLACK` for
  numbers and large vocabularies, and shrinks with a small one (one per 8 members beyond the
  answers): two extra guesses among 5 cities would pay 60% for no work, among 140 names 2%;
* a reply naming *every* member of a text kind (one with more members than answers) gets none
  either, however small the kind and whatever the request mentioned: context excuses a restatement, not the whole list (a
  5-city vocabulary with 2 cities in the request was otherwise creditable by listing all five).

So a reply can make at most ``answers + slack`` candidates "given" per kind, whatever its length.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

__all__ = ["ANSWER_SLACK", "missing_answers", "answer_kinds_exceeded"]

#: Candidates a reply may name beyond the answers of a kind (a little context: an id, a unit); a
#: small text vocabulary allows fewer (see the module doc).
ANSWER_SLACK = 2

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _numbers(text: str) -> set[float]:
    out = set()
    for n in _NUMBER.findall(text):
        try:
            out.add(round(float(n.replace(",", "")), 6))
        except ValueError:
            continue
    return out


def _kind_of(answer: str, kinds: Sequence[Collection[str]]) -> tuple[str, ...]:
    low = answer.lower()
    for kind in kinds:
        members = tuple(sorted({m.lower() for m in kind}))
        if low in members:
            return members
    return (low,)


def answer_kinds_exceeded(
    answers: Sequence[str], message: str, *, kinds: Sequence[Collection[str]] = (), context: str = "",
    slack: int = ANSWER_SLACK,
) -> set[str]:
    """The answers whose kind the reply over-names (see the module doc); they score nothing."""
    text, ctx = message.lower(), context.lower()
    groups: dict[tuple[str, ...] | None, list[str]] = {}
    for ans in answers:
        groups.setdefault(None if _as_number(ans) is not None else _kind_of(ans, kinds), []).append(ans)
    exceeded: set[str] = set()
    for kind, members in groups.items():
        allowed = slack
        if kind is None:
            given = _numbers(ctx)
            asked = any(round(float(a), 6) in given for a in members)  # a choice among numbers the user named
            candidates = len(_numbers(text) - (set() if asked else given))
        else:
            pool = set(kind) | {a.lower() for a in members}
            named = {c for c in pool if c in text}
            asked = any(a.lower() in ctx for a in members)
            candidates = sum(1 for c in named if asked or c not in ctx)
            if len(pool) > len(set(members)) and named == pool:  # the whole vocabulary, however much of it was context
                exceeded.update(members)
                continue
            allowed = min(slack, (len(pool) - len(set(members))) // 8)
        if candidates > len(set(members)) + allowed:
            exceeded.update(members)
    return exceeded


def missing_answers(
    answers: Sequence[str], message: str, *, kinds: Sequence[Collection[str]] = (), context: str = "",
    slack: int = ANSWER_SLACK,
) -> list[str]:
    """Required facts absent from the reply (case-insensitive; numbers by value), under the bound.

    ``kinds``: the env's vocabularies of text answers (names, statuses); ``context``: the user's
    request, whose mentions are not counted as candidates.

    >>> missing_answers(["shipped", "45.50"], "Your order O1003 was Shipped; you paid $45.5.", context="order O1003")
    []
    >>> missing_answers(["delivered"], "It is on its way.")
    ['delivered']
    >>> missing_answers(["45"], " ".join(map(str, range(100))))  # hedging: every number at once
    ['45']
    >>> statuses = ["pending", "shipped", "delivered", "cancelled"]
    >>> missing_answers(["shipped"], "pending, shipped, delivered or cancelled", kinds=[statuses])
    ['shipped']
    >>> missing_answers(["shipped"], "Shipped, or maybe pending.", kinds=[statuses])  # one guess too many of 4
    ['shipped']
    >>> missing_answers(["shipped"], "It was shipped or pending.", kinds=[statuses], context="shipped or pending?")
    ['shipped']
    """
    text = message.lower()
    exceeded = answer_kinds_exceeded(answers, message, kinds=kinds, context=context, slack=slack)
    missing = []
    for ans in answers:
        value = _as_number(ans)
        if ans in exceeded:
            missing.append(ans)
        elif value is None:
            if ans.lower() not in text:
                missing.append(ans)
        elif round(value, 6) not in _numbers(text):
            missing.append(ans)
    return missing
