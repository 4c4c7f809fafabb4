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

Reply, request and answers are compared as a reader sees them (:func:`_fold`): NFKC, casefolded,
invisible format characters (zero-width joiners, soft hyphens) dropped, common Cyrillic/Greek
look-alike letters read as Latin, runs of whitespace as one space. Otherwise a reply could show a
reader every name while the grader saw one ("alice smith" plain, every other name with a zero-width
joiner inside or a Cyrillic "a"). Numbers count in every written form a reader takes for a number:
decimal, ``4.5e1``, ``0x2d``; number words ("forty-six") count as candidates (never as the answer),
so a reply cannot hedge with every other value spelled out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence

__all__ = ["ANSWER_SLACK", "missing_answers", "answer_kinds_exceeded"]

#: Candidates a reply may name beyond the answers of a kind (a little context: an id, a unit); a
#: small text vocabulary allows fewer (see the module doc).
ANSWER_SLACK = 2

_NUMBER = re.compile(r"-?0x[0-9a-f]+|-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")
#: Number words, a phrase per match ("forty-six"); a bare "one" is too common a word to count.
_NUMBER_WORD = re.compile(
    r"\b(?:zero|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen"
    r"|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million"
    r"|billion)(?:[\s-]+(?:and[\s-]+)?(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen"
    r"|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
    r"|hundred|thousand|million|billion))*\b"
)
#: Look-alike letters a reader takes for Latin ones (Cyrillic and Greek lower case, after casefolding).
_LOOKALIKES = str.maketrans("аеорсухіјѕԁԛԝӏɑοντικαρχ", "aeopcyxijsdqwlaovtikapx")
_WHITESPACE = re.compile(r"\s+")


def _fold(text: str) -> str:
    """``text`` as a reader compares it: NFKC, casefolded, format characters dropped, look-alike
    letters as Latin, whitespace runs as one space (see the module doc)."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf").casefold().translate(_LOOKALIKES)
    return _WHITESPACE.sub(" ", text)


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _value(token: str) -> float | None:
    neg, body = token.startswith("-"), token.lstrip("-")
    try:
        value = float(int(body, 16)) if body.startswith("0x") else float(body.replace(",", ""))
    except (ValueError, OverflowError):
        return None
    return -value if neg else value


def _numbers(text: str) -> set[float]:
    """The distinct numbers of folded ``text``, by value (``4.5e1``, ``0x2d`` and ``45`` are one)."""
    return {round(v, 6) for n in _NUMBER.findall(text) if (v := _value(n)) is not None and v == v}


def _kind_of(answer: str, kinds: Sequence[Collection[str]]) -> tuple[str, ...]:
    low = _fold(answer)
    for kind in kinds:
        members = tuple(sorted({_fold(m) for m in kind}))
        if low in members:
            return members
    return (low,)


def answer_kinds_exceeded(
    answers: Sequence[str], message: str, *, kinds: Sequence[Collection[str]] = (), context: str = "",
    slack: int = ANSWER_SLACK,
) -> set[str]:
    """The answers whose kind the reply over-names (see the module doc); they score nothing."""
    text, ctx = _fold(message), _fold(context)
    groups: dict[tuple[str, ...] | None, list[str]] = {}
    for ans in answers:
        groups.setdefault(None if _as_number(ans) is not None else _kind_of(ans, kinds), []).append(ans)
    exceeded: set[str] = set()
    for kind, members in groups.items():
        allowed = slack
        if kind is None:
            given = _numbers(ctx)
            asked = any(round(float(a), 6) in given for a in members)  # a choice among numbers the user named
            words = set(_NUMBER_WORD.findall(text)) - (set() if asked else set(_NUMBER_WORD.findall(ctx)))
            candidates = len(_numbers(text) - (set() if asked else given)) + len(words)
        else:
            pool = set(kind) | {_fold(a) for a in members}
            named = {c for c in pool if c in text}
            asked = any(_fold(a) in ctx for a in members)
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
    text = _fold(message)
    exceeded = answer_kinds_exceeded(answers, message, kinds=kinds, context=context, slack=slack)
    missing = []
    for ans in answers:
        value = _as_number(ans)
        if ans in exceeded:
            missing.append(ans)
        elif value is None:
            if _fold(ans) not in text:
                missing.append(ans)
        elif round(value, 6) not in _numbers(text):
            missing.append(ans)
    return missing
