"""The retriever protocol and the one place that picks a backend: in-process index or server client."""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from agentgym.errors import ConfigError
from agentgym.tools.retrieval.bm25 import bm25_index
from agentgym.tools.retrieval.corpus import Corpus, Hit
from agentgym.tools.retrieval.dense import dense_index

METHODS = ("bm25", "dense")


@runtime_checkable
class Retriever(Protocol):
    """Anything with `search(query, k) -> list[Hit]`: `BM25Index`, `DenseIndex`, `RetrievalClient`."""

    def search(self, query: str, k: int = 3) -> list[Hit]: ...


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
    return (dense_index if method == "dense" else bm25_index)(corpus, cache_dir=cache_dir)
