"""Search QA tasks: multi-hop questions generated from the knowledge base, and real-data loaders.

A generated question starts from one named entity and follows functional relations through
the knowledge base (bridge questions), or first compares two named entities on a year and
then continues from the winner (comparison questions, as in HotpotQA — but the answer is a
further hop away, never one of the two names, so it cannot be guessed from the question).
Each hop is one fact stated in exactly one passage, so the task knows its **gold supporting
passages** and the query an oracle issues to find each of them.

``hops`` is the number of distinct gold passages: 1 = a single lookup, 4 = e.g. *work →
creator → birthplace → country → capital*. Ids encode everything needed to regenerate the
task: ``searchqa/{kb_seed}-{kb_entities}/{hops}/{seed}``.

Loaders read the data users already have: HotpotQA (``_id``, ``question``, ``answer``,
``supporting_facts``), NQ-open (``question``, ``answer`` or ``answers`` list) and FlashRAG
(``id``, ``question``, ``golden_answers``, ``metadata``), as JSONL or a JSON array.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError, TaskError
from turngym.core.task import Task, read_jsonl
from turngym.envs.search.kb import ATTRIBUTES, YEAR_ATTRIBUTE, Entity, KnowledgeBase
from turngym.envs.search.verifier import normalize_answer

__all__ = ["SearchTask", "generate_task", "generate_tasks", "parse_task_id", "load_qa", "MAX_HOPS"]

MAX_HOPS = 4


@dataclass(frozen=True)
class SearchTask(Task):
    """A question with its answer, answer aliases and gold supporting passages.

    Attributes:
        gold: the canonical answer (``Task.gold``; information-gain rewards score it).
        aliases: other accepted answer strings.
        support: gold supporting passage keys, in hop order.
        support_key: what ``support`` names: ``"id"`` (passage ids) or ``"title"``.
        hop_queries: one query per gold passage, in order: what the oracle searches.
        hops: number of gold supporting passages (0 when the source gives none).
        kind: ``bridge``, ``comparison`` or ``open`` (no gold support known).
    """

    aliases: tuple[str, ...] = ()
    support: tuple[str, ...] = ()
    support_key: str = "id"
    hop_queries: tuple[str, ...] = ()
    hops: int = 0
    kind: str = "bridge"

    @property
    def answers(self) -> tuple[str, ...]:
        """The gold answer followed by its aliases."""
        return (str(self.gold), *self.aliases)


# ----------------------------------------------------------------------------------- phrasing
_NP = {
    "born_in": "the birthplace of {x}",
    "alma_mater": "the university attended by {x}",
    "employer": "the employer of {x}",
    "headquarters": "the city where {x} is based",
    "founder": "the founder of {x}",
    "country": "the country in which {x} lies",
    "capital": "the capital of {x}",
    "creator": {"novel": "the author of {x}", "film": "the director of {x}", "album": "the artist who recorded {x}"},
    "publisher": {"novel": "the publisher of {x}", "film": "the studio that produced {x}",
                  "album": "the label that released {x}"},
}
_QUESTION = {
    "born_in": "In which city was {x} born?",
    "alma_mater": "Which university did {x} attend?",
    "employer": "Which company did {x} work for?",
    "headquarters": "In which city is {x} based?",
    "founder": "Who founded {x}?",
    "country": "In which country does {x} lie?",
    "capital": "What is the capital of {x}?",
    "creator": {"novel": "Who wrote {x}?", "film": "Who directed {x}?", "album": "Who recorded {x}?"},
    "publisher": {"novel": "Which publishing house published {x}?", "film": "Which studio produced {x}?",
                  "album": "Which label released {x}?"},
    "birth_year": "In what year was {x} born?",
    "founded": "In what year was {x} founded?",
    "year": {"novel": "In what year did {x} first appear?", "film": "In what year did {x} first appear?",
             "album": "In what year did {x} first appear?"},
    "river": "Which river flows through {x}?",
    "currency": "What is the currency of {x}?",
}
_COMPARE = {
    "person": "the elder of {a} and {b}",
    "org": "the older of {a} and {b}",
    "city": "the older of {a} and {b}",
    "work": "the earlier of {a} and {b}",
}
#: the word that picks a fact's passage out of the entity's passages (the oracle's query).
_KEYWORD = {
    "born_in": "born raised", "alma_mater": "studied", "employer": "worked", "headquarters": "based",
    "founder": "founded", "founded": "founded", "country": "city", "river": "river", "capital": "capital",
    "currency": "currency", "birth_year": "born", "creator": None, "year": None,
    "publisher": {"novel": "published", "film": "produced", "album": "released"},
}


def _phrase(table: Mapping[str, Any], fact: str, subject: Entity, x: str) -> str:
    t = table[fact]
    return (t[subject.kind] if isinstance(t, dict) else t).format(x=x)


def _hop_query(subject: Entity, fact: str) -> str:
    kw = _KEYWORD[fact]
    if kw is None:  # facts in a work's first passage: its medium names it ("novel", "film")
        kw = subject.kind
    elif isinstance(kw, dict):
        kw = kw[subject.kind]
    return f"{subject.name} {kw}"


def _answer_of(kb: KnowledgeBase, subject: Entity, fact: str) -> tuple[str, tuple[str, ...]]:
    if fact in subject.rels:
        obj = kb.by_id[subject.rels[fact]]
        return obj.name, obj.aliases
    value = subject.attrs[fact]
    if fact == "river":  # "Oss River": also "River Oss", "the Oss"
        root = str(value).rsplit(" ", 1)[0]
        return str(value), (f"River {root}", root)
    return str(value), ()


# ----------------------------------------------------------------------------------- generation
def _walk(kb: KnowledgeBase, rng: random.Random, start: Entity, steps: int, avoid: set[str],
          exclude_attr: str | None = None) -> list[tuple[Entity, str]] | None:
    """``steps`` facts from ``start``: relations, the last may be an attribute; no entity twice."""
    path: list[tuple[Entity, str]] = []
    cur = start
    seen = set(avoid) | {start.id}
    for i in range(steps):
        options = sorted(cur.rels)
        if i == steps - 1:
            options += [a for a in ATTRIBUTES[cur.type] if a != exclude_attr or i > 0]
        if not options:
            return None
        fact = rng.choice(options)
        path.append((cur, fact))
        if fact in cur.rels:
            nxt = kb.by_id[cur.rels[fact]]
            if nxt.id in seen:
                return None
            seen.add(nxt.id)
            cur = nxt
    return path


def _bridge(kb: KnowledgeBase, rng: random.Random, hops: int) -> dict[str, Any] | None:
    start = rng.choice(kb.entities)
    path = _walk(kb, rng, start, hops, set())
    if path is None:
        return None
    np_ = start.name
    for subject, fact in path[:-1]:
        np_ = _phrase(_NP, fact, subject, np_)
    subject, fact = path[-1]
    question = _phrase(_QUESTION, fact, subject, np_)
    support = [kb.fact_passage[(s.id, f)] for s, f in path]
    queries = [_hop_query(s, f) for s, f in path]
    return dict(question=question, answer=_answer_of(kb, subject, fact), support=support, queries=queries,
                named=[start], kind="bridge")


def _comparison(kb: KnowledgeBase, rng: random.Random, hops: int) -> dict[str, Any] | None:
    etype = rng.choice(sorted(YEAR_ATTRIBUTE))
    attr = YEAR_ATTRIBUTE[etype]
    a, b = rng.sample(kb.by_type[etype], 2)
    if a.attrs[attr] == b.attrs[attr]:
        return None
    winner = a if a.attrs[attr] < b.attrs[attr] else b
    path = _walk(kb, rng, winner, rng.randint(1, max(1, hops - 1)), {a.id, b.id}, exclude_attr=attr)
    if path is None:
        return None
    np_ = _COMPARE[etype].format(a=a.name, b=b.name)
    for subject, fact in path[:-1]:
        np_ = _phrase(_NP, fact, subject, np_)
    subject, fact = path[-1]
    question = _phrase(_QUESTION, fact, subject, np_)
    pairs = [(a, attr), (b, attr), *path]
    support: list[str] = []
    queries: list[str] = []
    for s, f in pairs:
        pid = kb.fact_passage[(s.id, f)]
        if pid not in support:
            support.append(pid)
            queries.append(_hop_query(s, f))
    return dict(question=question, answer=_answer_of(kb, subject, fact), support=support, queries=queries,
                named=[a, b], kind="comparison")


def _words_in(needle: str, hay: str) -> bool:
    n = normalize_answer(needle)
    return bool(n) and f" {n} " in f" {normalize_answer(hay)} "


def generate_task(kb: KnowledgeBase, seed: int, hops: int, *, comparison_rate: float = 0.3) -> SearchTask:
    """The task ``(seed, hops)`` over ``kb`` (deterministic; rejection-sampled until valid).

    A draw is rejected when the answer (or an alias) appears in the question, or when a
    comparison's support does not come to exactly ``hops`` passages.

    >>> from turngym.envs.search.kb import build_kb
    >>> t = generate_task(build_kb(0, 200), seed=3, hops=2)
    >>> t.hops, len(t.support), len(t.hop_queries), t.id
    (2, 2, 2, 'searchqa/0-200/2/3')
    """
    if not 1 <= hops <= MAX_HOPS:
        raise ConfigError(f"hops must be in 1..{MAX_HOPS}, got {hops}")
    rng = random.Random(f"turngym-search-task/{kb.seed}/{kb.size}/{hops}/{seed}")
    for _ in range(1000):
        draw = _comparison(kb, rng, hops) if hops >= 2 and rng.random() < comparison_rate else _bridge(kb, rng, hops)
        if draw is None or len(draw["support"]) != hops:
            continue
        gold, aliases = draw["answer"]
        if any(_words_in(ans, draw["question"]) for ans in (gold, *aliases)):
            continue
        return SearchTask(
            id=f"searchqa/{kb.seed}-{kb.size}/{hops}/{seed}",
            prompt=draw["question"],
            gold=gold,
            meta={"source": "generated", "kb_seed": kb.seed, "kb_entities": kb.size},
            aliases=tuple(aliases),
            support=tuple(draw["support"]),
            support_key="id",
            hop_queries=tuple(draw["queries"]),
            hops=hops,
            kind=draw["kind"],
        )
    raise TaskError(f"could not generate a {hops}-hop task for seed {seed} (knowledge base too small?)")


def generate_tasks(kb: KnowledgeBase, n: int, *, seed: int = 0, min_hops: int = 1, max_hops: int = MAX_HOPS,
                   comparison_rate: float = 0.3) -> list[SearchTask]:
    """``n`` tasks with hop counts cycling through ``min_hops..max_hops``."""
    span = max_hops - min_hops + 1
    return [generate_task(kb, seed * 1_000_003 + i, min_hops + i % span, comparison_rate=comparison_rate)
            for i in range(n)]


_GEN_ID = re.compile(r"^searchqa/(-?\d+)-(\d+)/(\d+)/(-?\d+)$")


def parse_task_id(task_id: str) -> tuple[int, int, int, int] | None:
    """``(kb_seed, kb_entities, hops, seed)`` of a generated task id, or None."""
    m = _GEN_ID.match(task_id)
    return tuple(int(g) for g in m.groups()) if m else None  # type: ignore[return-value]


# ----------------------------------------------------------------------------------- loaders
def _rows(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if p.suffix == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, list):
            raise TaskError(f"{path}: a .json QA file must hold a list of objects")
        return data
    return list(read_jsonl(p))


def _support_titles(facts: Any) -> list[str]:
    """Titles from HotpotQA ``[[title, sent_id], ...]`` or the HF ``{"title": [...]}`` form."""
    if isinstance(facts, dict):
        titles = facts.get("title", [])
    elif isinstance(facts, list):
        titles = [f[0] if isinstance(f, (list, tuple)) else f for f in facts]
    else:
        titles = []
    out: list[str] = []
    for t in titles:
        if isinstance(t, str) and t not in out:
            out.append(t)
    return out


def _detect(row: Mapping[str, Any]) -> str:
    if "golden_answers" in row:
        return "flashrag"
    if "supporting_facts" in row or "_id" in row:
        return "hotpotqa"
    if "answer" in row or "answers" in row:
        return "nq"
    raise TaskError(f"cannot tell the QA format of a row with keys {sorted(row)}; expected HotpotQA "
                    "(question, answer, supporting_facts), NQ (question, answer(s)) or FlashRAG (golden_answers)")


def _as_list(x: Any) -> list[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, (list, tuple)):
        return [str(v) for v in x if v is not None and str(v).strip()]
    return []


def load_qa(path: str | Path, *, format: str = "auto", limit: int | None = None) -> list[SearchTask]:  # noqa: A002
    """Load QA data as :class:`SearchTask` s.

    Args:
        path: a JSONL file (or a ``.json`` array, as HotpotQA ships).
        format: ``auto`` (per row), ``hotpotqa``, ``nq`` or ``flashrag``.
        limit: read at most this many tasks.

    Gold support is taken from HotpotQA ``supporting_facts`` (or FlashRAG's
    ``metadata.supporting_facts``) as passage *titles*; the oracle then searches each title.
    NQ-style rows have no gold support (``kind="open"``; support signals stay 0).
    """
    if format not in ("auto", "hotpotqa", "nq", "flashrag"):
        raise ConfigError(f"format must be auto, hotpotqa, nq or flashrag, got {format!r}")
    tasks: list[SearchTask] = []
    for i, row in enumerate(_rows(path)):
        if limit is not None and len(tasks) >= limit:
            break
        if not isinstance(row, dict) or not isinstance(row.get("question"), str):
            raise TaskError(f"{path}: row {i} needs a 'question' string")
        fmt = _detect(row) if format == "auto" else format
        meta: dict[str, Any] = {"source": str(path), "format": fmt}
        if fmt == "flashrag":
            answers = _as_list(row.get("golden_answers"))
            md = row.get("metadata") or {}
            titles = _support_titles(md.get("supporting_facts")) if isinstance(md, dict) else []
            kind = str(md.get("type", "")) if isinstance(md, dict) else ""
            tid = row.get("id", f"flashrag/{i}")
        elif fmt == "hotpotqa":
            answers = _as_list(row.get("answer"))
            titles = _support_titles(row.get("supporting_facts"))
            kind = str(row.get("type", ""))
            tid = row.get("_id", row.get("id", f"hotpotqa/{i}"))
            if "level" in row:
                meta["level"] = row["level"]
        else:
            answers = _as_list(row.get("answers", row.get("answer")))
            titles = []
            kind = ""
            tid = row.get("id", f"nq/{i}")
        if not answers:
            raise TaskError(f"{path}: row {i} ({fmt}) has no answer")
        question = row["question"].strip()
        tasks.append(SearchTask(
            id=str(tid),
            prompt=question,
            gold=answers[0],
            meta=meta,
            aliases=tuple(answers[1:]),
            support=tuple(titles),
            support_key="title",
            hop_queries=tuple(titles) if titles else (question,),
            hops=len(titles),
            kind=kind if kind in ("bridge", "comparison") else ("bridge" if titles else "open"),
        ))
    if not tasks:
        raise TaskError(f"{path}: no QA rows found")
    return tasks


def as_tasks(tasks: Sequence[SearchTask] | str | Path, *, format: str = "auto") -> tuple[SearchTask, ...]:  # noqa: A002
    """Tasks given as objects or as a QA file path."""
    if isinstance(tasks, (str, Path)):
        return tuple(load_qa(tasks, format=format))
    out = tuple(tasks)
    bad = [type(t).__name__ for t in out if not isinstance(t, SearchTask)]
    if bad:
        raise ConfigError(f"tasks must be SearchTask objects, got {sorted(set(bad))}")
    return out
