"""Product search: WebShop's recipe (BM25 over title + description + first bullet + options).

WebShop indexes each product with Lucene (pyserini) and returns the top 50. We keep the
document recipe and the top-k, and score with :mod:`bm25s` (numpy + scipy, no JVM). Tokens are
lowercased alphanumeric runs, English stopwords dropped, with a light plural stemmer standing
in for Lucene's analyzer so that "shirts" finds "shirt".

Ranking is deterministic: documents with equal scores are ordered by catalog index, and only
documents that share at least one term with the query are returned (as Lucene does).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import bm25s
import numpy as np

from turngym.envs.shop.vocab import STOPWORDS

__all__ = ["tokenize", "SearchIndex", "SEARCH_RETURN_N"]

#: How many results a search returns (WebShop's ``SEARCH_RETURN_N``).
SEARCH_RETURN_N = 50

_TOKEN = re.compile(r"[a-z0-9]+")
_STEM_CACHE: dict[str, str] = {}


def _stem(token: str) -> str:
    stem = _STEM_CACHE.get(token)
    if stem is None:
        stem = token
        if len(token) > 4 and token.endswith("ies"):  # cookies, berries -> cooki, berri
            stem = token[:-2]
        elif len(token) > 4 and token.endswith(("sses", "shes", "ches", "xes")):  # dresses -> dress
            stem = token[:-2]
        elif len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
            stem = token[:-1]  # shirts -> shirt
        if len(stem) > 3 and stem.endswith("ie"):  # cookie -> cooki
            stem = stem[:-1]
        elif len(stem) > 3 and stem.endswith("y") and stem[-2] not in "aeiou":  # berry -> berri
            stem = stem[:-1] + "i"
        if len(_STEM_CACHE) < 1_000_000:
            _STEM_CACHE[token] = stem
    return stem


def tokenize(text: str) -> list[str]:
    """Lowercase, split on non-alphanumerics, drop stopwords, strip plurals.

    >>> tokenize("I need 2 Shirts for the beach, and cookies!")
    ['2', 'shirt', 'beach', 'cooki']
    >>> tokenize("cookie berry berries honey") == tokenize("cookies berri berry honey")
    True
    """
    return [_stem(t) for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


class SearchIndex:
    """A BM25 index over product documents.

    Args:
        documents: one text per product, in catalog order (see :func:`product_document`).
    """

    def __init__(self, documents: Iterable[str]) -> None:
        vocab: dict[str, int] = {}
        corpus_ids: list[list[int]] = []
        setdefault = vocab.setdefault
        for doc in documents:
            corpus_ids.append([setdefault(tok, len(vocab)) for tok in tokenize(doc)])
        self.n_docs = len(corpus_ids)
        self.vocab = vocab
        #: The bm25s model (Lucene's BM25 variant); :meth:`scores` reads its score matrix.
        self.bm25 = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
        self.bm25.index((corpus_ids, dict(vocab)), show_progress=False, create_empty_token=False)
        scores = self.bm25.scores
        self._data: np.ndarray = scores["data"]
        self._indices: np.ndarray = scores["indices"]
        self._indptr: np.ndarray = scores["indptr"]

    def query_ids(self, query: str) -> list[int]:
        """The query's token ids (unknown tokens dropped, repeats kept as Lucene does)."""
        vocab = self.vocab
        return [vocab[t] for t in tokenize(query) if t in vocab]

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Catalog indices of the top ``k`` documents for ``query``, best first."""
        return self.search_ids(self.query_ids(query), k)

    def scores(self, token_ids: Sequence[int]) -> np.ndarray:
        """BM25 score of every document for the query ``token_ids`` (bm25s's ``get_scores``).

        bm25s accumulates with ``np.add.at``; a term's postings hold each document once, so a
        fancy-indexed ``+=`` gives the same sums several times faster.
        """
        scores = np.zeros(self.n_docs, dtype=np.float32)
        indptr, indices, data = self._indptr, self._indices, self._data
        for t in token_ids:
            start, end = indptr[t], indptr[t + 1]
            scores[indices[start:end]] += data[start:end]
        return scores

    def search_ids(self, token_ids: Sequence[int], k: int = SEARCH_RETURN_N) -> list[int]:
        """Top ``k`` documents for already-tokenized query ids, best first, ties by index."""
        if not token_ids:
            return []
        scores = self.scores(token_ids)
        hits = np.flatnonzero(scores > 0)
        if hits.size > k:
            # Keep everything tied with the k-th score, then sort by (-score, index).
            kth = np.partition(scores[hits], hits.size - k)[hits.size - k]
            hits = hits[scores[hits] >= kth]
        order = np.lexsort((hits, -scores[hits]))
        return hits[order[:k]].tolist()
