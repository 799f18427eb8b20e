"""The retriever protocol and the one place that picks a backend: in-process index or server client."""
from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentgym.errors import ConfigError
from agentgym.tools.retrieval.bm25 import BM25Index
from agentgym.tools.retrieval.corpus import Corpus, Hit
from agentgym.tools.retrieval.dense import DenseIndex

METHODS = ("bm25", "dense")
_INDEXES: dict[tuple, Any] = {}
# one lock per index class: a long dense embedding must not hold up building a BM25 index
_LOCKS: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)


@runtime_checkable
class Retriever(Protocol):
    """Anything with `search(query, k) -> list[Hit]`: `BM25Index`, `DenseIndex`, `RetrievalClient`."""

    def search(self, query: str, k: int = 3) -> list[Hit]: ...


def shared_index(index_cls: type, corpus: Corpus, cache_dir: str | Path | None = None) -> Any:
    """The process-wide `index_cls(corpus, cache_dir=...)`, built on first use, so many envs share one."""
    key = (index_cls.__name__, corpus.fingerprint, str(cache_dir))
    with _LOCKS[index_cls.__name__]:
        if key not in _INDEXES:
            _INDEXES[key] = index_cls(corpus, cache_dir=cache_dir)
        return _INDEXES[key]


def get_retriever(corpus: Corpus | None = None, method: str = "bm25", url: str | None = None,
                  cache_dir: str | Path | None = None) -> Retriever:
    """A client of the server at `url` when given, else the process-wide in-memory index of `corpus`."""
    if method not in METHODS:
        raise ConfigError(f"unknown retrieval method {method!r}; use one of {', '.join(METHODS)}")
    if url:
        from agentgym.tools.retrieval.client import RetrievalClient

        return RetrievalClient(url, method=method)
    if corpus is None:
        raise ConfigError("get_retriever needs a corpus or the url of a retrieval server")
    return shared_index(DenseIndex if method == "dense" else BM25Index, corpus, cache_dir)
