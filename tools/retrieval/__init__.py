"""Retrieval for search envs: BM25 (`bm25s`), dense (sentence-transformers), a FastAPI server and an
httpx client, so many env workers can share one index.

    from agentgym.tools.retrieval import corpus_from_spec, get_retriever
    retriever = get_retriever(corpus_from_spec("generated:0:small"), method="bm25")
    retriever.search("Who founded the Kigel Orchestra?", k=3)   # -> list[Hit]

Heavy modules (bm25s, torch, fastapi) load only when an index or the server is built.
"""
from agentgym.tools.retrieval.base import Retriever, get_retriever
from agentgym.tools.retrieval.corpus import (Corpus, Document, Hit, RetrievalError, corpus_from_spec, load_corpus,
                                             register_corpus_source)

__all__ = ["Corpus", "Document", "Hit", "RetrievalError", "Retriever", "corpus_from_spec", "get_retriever",
           "load_corpus", "register_corpus_source"]
