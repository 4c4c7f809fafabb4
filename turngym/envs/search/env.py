"""``turngym/SearchQA-v0``: multi-hop question answering with a search engine (Search-R1 protocol)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError, TaskError
from turngym.core.hashing import state_hash
from turngym.core.parsing import parse_tag
from turngym.core.spec import RewardSpec, Signal
from turngym.envs.search import MAX_TURNS, oracle
from turngym.envs.search.kb import KnowledgeBase, build_kb
from turngym.envs.search.retrieval import (
    BM25Retriever,
    DenseRetriever,
    RemoteRetriever,
    Retriever,
    format_passages,
    load_corpus,
)
from turngym.envs.search.tasks import MAX_HOPS, SearchTask, as_tasks, generate_task, parse_task_id
from turngym.envs.search.verifier import (
    answer_in_text,
    exact_match,
    f1_score,
    normalize_answer,
    normalize_query,
    support_keys,
)

__all__ = ["SearchQAEnv", "SearchState", "shared_retriever"]

_TAGS = ("search", "answer")
MAX_QUERY_CHARS = 1000

SYSTEM_PROMPT = """\
Answer the question by searching an encyclopedia of made-up facts (you cannot know the answer, look it up).
Each message you write is exactly one action, nothing else:
<search> QUERY </search> to search, or <answer> ANSWER </answer> to answer (short, ends the episode).
Search one fact at a time, with a short query of a few words. The search results come back
inside <information> tags: never write <information> yourself.
Example:
Question: In what year was the publisher of Blue Harbor founded?
You: <search> Blue Harbor publisher </search>
Reply: Doc 1(Title: "Blue Harbor") Blue Harbor was published by Vellamir Press.
You: <search> Vellamir Press founded </search>
Reply: Doc 1(Title: "Vellamir Press") Vellamir Press was founded in 1921.
You: <answer> 1921 </answer>"""


@dataclass(frozen=True, slots=True)
class SearchState:
    """What the agent has done: passages seen, gold support found, queries issued.

    Frozen, so a snapshot is a reference, not a copy.
    """

    seen: frozenset[str] = frozenset()
    found: frozenset[str] = frozenset()
    queries: frozenset[str] = frozenset()


@lru_cache(maxsize=8)
def shared_retriever(kind: str, kb_seed: int, kb_entities: int) -> Retriever:
    """The ``bm25`` or ``dense`` index over the knowledge base ``(kb_seed, kb_entities)``.

    Built once per process and shared by every env instance on the same knowledge base (an
    8-env vector env indexes once, not eight times).
    """
    passages = build_kb(kb_seed, kb_entities).passages
    if kind == "bm25":
        return BM25Retriever(passages)
    if kind == "dense":
        return DenseRetriever(passages)
    raise ConfigError(f"retriever must be 'bm25', 'dense', an http(s) URL or a Retriever, got {kind!r}")


@lru_cache(maxsize=4)
def _corpus_retriever(kind: str, path: str, mtime: float) -> Retriever:
    passages = load_corpus(path)
    return BM25Retriever(passages) if kind == "bm25" else DenseRetriever(passages)


class SearchQAEnv(TurngymEnv[SearchTask, SearchState]):
    """Multi-hop question answering over a local corpus with a search tool (Search-R1 protocol).

    ## Description
    The agent receives a question about fictional entities of a seeded synthetic
    encyclopedia, so the answer cannot come from memory. It issues search queries, reads the
    top passages, and answers. Every question knows its gold supporting passages, so the env
    can tell which searches found new evidence. With ``tasks=`` and ``corpus=`` (or a remote
    ``retriever=``) the same env runs on real data (HotpotQA / NQ / FlashRAG files).

    ## Task Distribution
    Generated: hop count uniform in ``min_hops..max_hops`` (1–4); bridge questions (a chain of
    relations from one named entity) and, with probability ``comparison_rate`` for 2+ hops,
    comparison questions (the elder/older/earlier of two named entities, then further hops).
    The answer (or an alias) never appears in the question.

    ## Action Space
    Text. ``<search> query </search>`` retrieves the top ``top_k`` passages;
    ``<answer> text </answer>`` ends the episode. Only the first of these tags counts; text
    around it (reasoning, ``<think>``) is ignored.
    Valid: ``<search> Vellamir Press founded </search>``, ``<think>…</think><answer> 1921 </answer>``.
    Invalid: no tag, an unclosed or empty tag, a query over 1000 characters.

    ## Observation
    ``Question: …`` on reset; after a search, Search-R1's
    ``\\n\\n<information>Doc 1(Title: "T") text\\nDoc 2(…) …</information>\\n\\n``; a verdict after
    the answer; a correction after an invalid action.

    ## Rewards
    Outcome: 1 if the answer exactly matches the gold answer or an alias after SQuAD
    normalisation (lower-case, no punctuation or articles), else 0.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | new_evidence | 0–1 | search turns | a gold supporting passage was retrieved for the first time |
    | support_recall | 0–1 | every turn | fraction of gold supporting passages retrieved so far (a potential) |
    | answer_in_context | 0–1 | search turns | a gold answer string occurs in the retrieved passages |
    | repeat_query | 0–1 | search turns | the normalised query was already issued this episode |
    | redundant_docs | 0–1 | search turns | share of the retrieved passages already retrieved before |
    | answer_em | 0–1 | answer turn | exact match of the answer (the outcome) |
    | answer_f1 | 0–1 | answer turn | token F1 of the answer against the gold answers |

    ## Starting State
    A task drawn by the env's RNG, or ``options={"task": SearchTask | task_id}``.

    ## Episode End
    Terminated by ``<answer>``; truncated after ``max_turns`` (default 10).

    ## Arguments
    >>> import turngym
    >>> env = turngym.make("turngym/SearchQA-v0", kb_entities=200, min_hops=2, max_hops=2)
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    >>> obs.lstrip().startswith("<information>Doc 1(Title:"), info["signals"]["support_recall"]
    (True, 0.5)
    >>> _ = env.step(env.oracle_action())
    >>> obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    >>> reward, terminated, info["outcome"]["success"]
    (1.0, True, True)

    Other arguments: ``kb_seed`` and ``kb_entities`` pick the knowledge base (about 2.3
    passages per entity; built and indexed once per process); ``top_k`` (default 3, as
    Search-R1); ``retriever`` = ``"bm25"`` (default), ``"dense"`` (MiniLM, needs torch), an
    ``http(s)://…/retrieve`` URL or any :class:`~turngym.envs.search.retrieval.Retriever`;
    ``corpus`` = a corpus JSONL (``id``, ``contents``); ``tasks`` = SearchTasks or a QA file.

    ## Oracle
    Searches the gold hop queries (the bridge entity's name plus the fact's keyword) in order,
    skipping hops already found, then answers with the gold answer.

    ## Version History
    * v0: initial release.
    """

    reward_spec = RewardSpec(
        signals=(
            Signal("new_evidence", 0, 1, "verifiable", "this search retrieved a gold supporting passage not retrieved before", weight=0.2),
            Signal("support_recall", 0, 1, "verifiable", "fraction of the gold supporting passages retrieved so far", potential=True),
            Signal("answer_in_context", 0, 1, "verifiable", "a gold answer string occurs in this search's passages"),
            Signal("repeat_query", 0, 1, "verifiable", "this (normalised) query was already issued in the episode", weight=-0.1),
            Signal("redundant_docs", 0, 1, "verifiable", "share of this search's passages that were already retrieved"),
            Signal("answer_em", 0, 1, "verifiable", "the final answer exactly matches a gold answer after normalisation"),
            Signal("answer_f1", 0, 1, "verifiable", "token F1 of the final answer against the gold answers"),
        ),
        outcome="1 if the answer exactly matches the gold answer or an alias after SQuAD normalisation, else 0",
    )
    default_max_turns = MAX_TURNS
    task_type = SearchTask
    immutable_state = True
    system_prompt = SYSTEM_PROMPT
    #: generation stops after one complete action (Search-R1 stops at </search> too)
    stop_strings = ("</search>", "</answer>")
    max_new_tokens = 40  # one short query or answer in its tag
    action_prefix = "<"  # every action starts with a tag (a policy may force this start)

    def __init__(
        self,
        *,
        kb_seed: int = 0,
        kb_entities: int = 1200,
        min_hops: int = 1,
        max_hops: int = MAX_HOPS,
        comparison_rate: float = 0.3,
        top_k: int = 3,
        retriever: str | Retriever = "bm25",
        corpus: str | Path | None = None,
        tasks: Sequence[SearchTask] | str | Path | None = None,
        qa_format: str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not 1 <= min_hops <= max_hops <= MAX_HOPS:
            raise ConfigError(f"need 1 <= min_hops <= max_hops <= {MAX_HOPS}, got {min_hops}, {max_hops}")
        if not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"top_k must be a positive int, got {top_k!r}")
        if not 0.0 <= comparison_rate <= 1.0:
            raise ConfigError(f"comparison_rate must be in [0, 1], got {comparison_rate!r}")
        if corpus is not None and tasks is None:
            raise ConfigError("corpus= needs tasks= (a QA file or SearchTasks): generated questions use the synthetic corpus")
        self.min_hops, self.max_hops = min_hops, max_hops
        self.comparison_rate = comparison_rate
        self.top_k = top_k
        self._set_task_pool(as_tasks(tasks, format=qa_format) if tasks is not None else None)
        self.kb: KnowledgeBase | None = None
        if corpus is None:
            self.kb = build_kb(kb_seed, kb_entities)
        self.retriever = self._resolve_retriever(retriever, corpus, kb_seed, kb_entities)
        self.state: SearchState = SearchState()

    @staticmethod
    def _resolve_retriever(retriever: str | Retriever, corpus: str | Path | None, kb_seed: int, kb_entities: int) -> Retriever:
        if not isinstance(retriever, str):
            if not isinstance(retriever, Retriever):
                raise ConfigError(f"retriever must be 'bm25', 'dense', a URL or a Retriever, got {type(retriever).__name__}")
            return retriever
        if retriever.startswith(("http://", "https://")):
            return RemoteRetriever(retriever)
        if retriever not in ("bm25", "dense"):
            raise ConfigError(f"retriever must be 'bm25', 'dense', an http(s) URL or a Retriever, got {retriever!r}")
        if corpus is not None:
            path = Path(corpus).resolve()
            if not path.is_file():
                raise ConfigError(f"corpus file {str(corpus)!r} does not exist")
            return _corpus_retriever(retriever, str(path), path.stat().st_mtime)
        return shared_retriever(retriever, kb_seed, kb_entities)

    # -- tasks -------------------------------------------------------------------------
    def _generate_task(self, rng: np.random.Generator) -> SearchTask:
        assert self.kb is not None  # a corpus= env needs tasks=
        hops = int(rng.integers(self.min_hops, self.max_hops + 1))
        return generate_task(self.kb, int(rng.integers(1 << 31)), hops, comparison_rate=self.comparison_rate)

    def _regenerate_task(self, task_id: str) -> SearchTask:
        parsed = parse_task_id(task_id)
        if parsed is None or self.kb is None:
            raise self._unknown_task(task_id)
        kb_seed, kb_entities, hops, seed = parsed
        if (kb_seed, kb_entities) != (self.kb.seed, self.kb.size):
            raise TaskError(
                f"task {task_id!r} belongs to knowledge base {kb_seed}-{kb_entities}, but this env uses "
                f"{self.kb.seed}-{self.kb.size}; make the env with kb_seed={kb_seed}, kb_entities={kb_entities}"
            )
        return generate_task(self.kb, seed, hops, comparison_rate=self.comparison_rate)

    # -- episode ---------------------------------------------------------------------------
    def _reset(self, task: SearchTask, options: Mapping[str, Any]) -> str:
        meta = task.meta
        if self.kb is not None and meta.get("source") == "generated" and (
            (meta.get("kb_seed"), meta.get("kb_entities")) != (self.kb.seed, self.kb.size)
        ):
            raise ConfigError(
                f"task {task.id!r} was generated from knowledge base {meta.get('kb_seed')}-{meta.get('kb_entities')}, "
                f"this env searches {self.kb.seed}-{self.kb.size}; make the env with "
                f"kb_seed={meta.get('kb_seed')}, kb_entities={meta.get('kb_entities')}"
            )
        self.state = SearchState()
        return f"Question: {task.prompt}"

    def _recall(self, found: frozenset[str]) -> float:
        support = self.current_task.support
        return len(found) / len(support) if support else 0.0

    def _state_signals(self) -> dict[str, float]:
        return {"support_recall": self._recall(self.state.found)}

    def _step(self, action: str) -> Transition:
        task = self.current_task
        parsed = parse_tag(action, _TAGS, max_body=MAX_QUERY_CHARS)
        if not parsed.ok:
            return Transition(
                obs=f"\nInvalid action: {parsed.error}. To search, write <search> query </search>; "
                "to answer, write <answer> answer </answer>.\n",
                valid=False,
                invalid_reason=parsed.error,
            )
        act = parsed.value
        assert act is not None
        if act.tag == "answer":
            answers = task.answers
            em = 1.0 if exact_match(act.body, answers) else 0.0
            f1 = f1_score(act.body, answers)
            return Transition(
                obs="Correct." if em else "Incorrect.",
                terminated=True,
                signals={"answer_em": em, "answer_f1": f1},
                outcome={"reward": em, "success": bool(em), "em": em, "f1": f1, "answer": act.body, "gold": task.gold,
                         "support_recall": self._recall(self.state.found), "distinct_queries": len(self.state.queries)},
            )
        return self._search(task, act.body)

    def _search(self, task: SearchTask, query: str) -> Transition:
        hits = self.retriever.search(query, self.top_k)
        state = self.state
        nq = normalize_query(query)
        ids = [h.passage.id for h in hits]
        gold = set(task.support)
        keys = set(support_keys(hits, task.support_key)) & gold
        new = keys - state.found
        found = state.found | new
        redundant = sum(1 for i in ids if i in state.seen) / len(ids) if ids else 0.0
        text = format_passages(hits).strip() or "No passages matched the query."
        self.state = SearchState(state.seen | frozenset(ids), found, state.queries | {nq})
        return Transition(
            obs=f"\n\n<information>{text}</information>\n\n",
            signals={
                "new_evidence": 1.0 if new else 0.0,
                "answer_in_context": 1.0 if answer_in_text(task.answers, " ".join(h.passage.contents for h in hits)) else 0.0,
                "repeat_query": 1.0 if nq in state.queries else 0.0,
                "redundant_docs": redundant,
            },
        )

    def _state_key(self) -> str:
        s = self.state
        return state_hash((self.task.id if self.task else "", tuple(sorted(s.seen)), tuple(sorted(s.queries))))

    def close(self) -> None:
        """Close the HTTP client of a remote retriever (local indexes are shared; kept)."""
        if isinstance(self.retriever, RemoteRetriever):
            self.retriever.close()
        super().close()

    # -- policies --------------------------------------------------------------------------
    def _oracle_action(self) -> str:
        return oracle.oracle_action(self)

    def sample_action(self, rng: np.random.Generator) -> str:
        """A search on 1–4 random words of the question, or (20%) an answer with one of them."""
        words = normalize_answer(self.task.prompt if self.task else "").split() or ["unknown"]
        if rng.random() < 0.8:
            k = int(rng.integers(1, min(4, len(words)) + 1))
            picked = [words[int(i)] for i in rng.choice(len(words), size=k, replace=False)]
            return f"<search> {' '.join(picked)} </search>"
        return f"<answer> {words[int(rng.integers(len(words)))]} </answer>"
