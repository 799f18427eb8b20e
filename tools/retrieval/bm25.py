"""BM25 retrieval through `bm25s` (sparse precomputed scores: a query costs a few sparse-row sums).

Queries and documents share one tokenizer: lowercase `\\w+` tokens minus English stopwords. Scoring goes
straight to `BM25.get_scores_from_ids` and an `argpartition` top-k, skipping `retrieve()`'s per-call
batching overhead, which dominates at one query per call. An index is built once per corpus fingerprint
and kept in memory, and on disk when `cache_dir` is given (`bm25s` save/load format).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from agentgym.errors import require
from agentgym.tools.retrieval.corpus import Corpus, Hit, shared_index

_TOKEN = re.compile(r"\w+")
_MAX_QUERY_TOKENS = 256  # a megabyte of garbage as a query costs no more than a long question


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def tokenize(text: str, stopwords: frozenset[str]) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]


class BM25Index:
    """BM25 (Lucene variant, k1=1.5, b=0.75) over a corpus; thread-safe for concurrent searches."""

    method = "bm25"

    def __init__(self, corpus: Corpus, k1: float = 1.5, b: float = 0.75, cache_dir: str | Path | None = None):
        bm25s = require("bm25s", "search")
        self.corpus = corpus
        self.stopwords = _stopwords()
        path = Path(cache_dir).expanduser() / f"bm25-{corpus.fingerprint}-{k1}-{b}" if cache_dir else None
        if path is not None and (path / "params.index.json").is_file():
            self.model = bm25s.BM25.load(str(path), show_progress=False)
        else:
            self.model = bm25s.BM25(k1=k1, b=b)
            tokens = [tokenize(t, self.stopwords) for t in corpus.index_texts()]
            self.model.index(tokens, show_progress=False)
            if path is not None:
                path.mkdir(parents=True, exist_ok=True)
                self.model.save(str(path), show_progress=False)
        self.vocab = self.model.vocab_dict

    def __len__(self) -> int:
        return len(self.corpus)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The top-k documents with a positive score, best first (fewer if few documents match)."""
        ids = [self.vocab[t] for t in tokenize(query[:20_000], self.stopwords)[:_MAX_QUERY_TOKENS]
               if t in self.vocab]
        if not ids or k < 1:
            return []
        scores = self.model.get_scores_from_ids(ids)
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]  # score descending, then position: deterministic ties
        return [self.corpus.hit(int(i), scores[i]) for i in top if scores[i] > 0]

    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]


def bm25_index(corpus: Corpus, cache_dir: str | Path | None = None) -> BM25Index:
    """The process-wide bm25 index of a corpus, built on first use."""
    return shared_index(BM25Index, corpus, cache_dir)
