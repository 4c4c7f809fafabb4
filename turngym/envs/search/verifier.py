"""Pure verdicts for the search env: answer EM/F1 and the per-search evidence signals.

Answer normalisation is the SQuAD / Search-R1 one (lower-case, drop punctuation and the
articles a/an/the, squeeze whitespace), so ``"The Oss River."`` matches ``"oss river"``. EM is
the outcome; token F1 is reported as a signal (partial credit that trainers may use).

Evidence signals are set computations over passage keys, checked against the task's gold
support (passage ids for generated tasks, titles for HotpotQA-style data):

* new evidence — this search returned a gold supporting passage not retrieved before;
* support recall — fraction of gold supporting passages retrieved so far (a potential);
* answer in context — a gold answer string occurs, as whole words, in this search's passages
  (Search-R1's ``is_retrieval_correct``);
* repeated query — the normalised query was already issued this episode;
* redundant passages — share of this search's passages already retrieved earlier (StepSearch's
  redundancy penalty).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

from turngym.envs.search.retrieval import Hit

__all__ = [
    "normalize_answer",
    "exact_match",
    "f1_score",
    "answer_in_text",
    "normalize_query",
    "support_keys",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "‘’“”–—")


@lru_cache(maxsize=65536)
def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower, no punctuation, no articles, single spaces.

    >>> normalize_answer("  The Oss-River. ")
    'ossriver'
    >>> normalize_answer("Kingdom of Quelland")
    'kingdom of quelland'
    """
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Sequence[str]) -> bool:
    """True if the normalised prediction equals any normalised gold answer.

    >>> exact_match("the Oss River", ["Oss River"]), exact_match("Oss", ["Oss River"])
    (True, False)
    """
    p = normalize_answer(prediction)
    return bool(p) and any(p == normalize_answer(g) for g in golds)


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Best token-level F1 of the prediction against the gold answers (SQuAD).

    >>> f1_score("Oss", ["Oss River"])
    0.6666666666666666
    """
    p_tokens = normalize_answer(prediction).split()
    best = 0.0
    for g in golds:
        g_tokens = normalize_answer(g).split()
        common = Counter(p_tokens) & Counter(g_tokens)
        same = sum(common.values())
        if same == 0:
            continue
        precision, recall = same / len(p_tokens), same / len(g_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def answer_in_text(golds: Sequence[str], text: str) -> bool:
    """True if some gold answer occurs in ``text`` as whole normalised words.

    >>> answer_in_text(["1921"], "It was founded in 1921."), answer_in_text(["192"], "in 1921")
    (True, False)
    """
    hay = f" {normalize_answer(text)} "
    return any(n and f" {n} " in hay for n in (normalize_answer(g) for g in golds))


def normalize_query(query: str) -> str:
    """A query's identity for repeat detection: normalised words, sorted, deduplicated.

    >>> normalize_query("Vellamir Press founded") == normalize_query("founded  the vellamir press?")
    True
    """
    return " ".join(sorted(set(normalize_answer(query).split())))


def support_keys(hits: Iterable[Hit], key: str) -> list[str]:
    """The key of each hit that gold support is matched on: passage ``id`` or ``title``."""
    if key == "title":
        return [h.passage.title for h in hits]
    return [h.passage.id for h in hits]
