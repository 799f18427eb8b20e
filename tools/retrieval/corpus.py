"""Documents, hits and corpora; the JSONL loader for real corpora.

A corpus file is JSON lines, one document per line, in the common layouts:
    {"id": "12", "title": "Paris", "text": "Paris is the capital ..."}           (DPR / BEIR style)
    {"id": "12", "contents": "\"Paris\"\nParis is the capital ..."}             (Search-R1 / Pyserini style)
`id` may also be `_id` or `docid`; a missing id becomes the line number. A `contents` field whose first
line is a (quoted) title is split into title and text, as Search-R1's wiki-18 dump is written.
Envs hand their own corpora to the retrieval tools with `register_corpus_source` (the search env's
`generated:SEED[:SIZE]`), so these tools never import an env.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable

from agentgym.errors import AgentGymError, ConfigError
from agentgym.registration import discover


class RetrievalError(AgentGymError):
    """The retriever or the retrieval server failed, or was asked something it cannot do."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Hit:
    """One retrieved passage with its retriever score (higher is better)."""

    doc_id: str
    title: str
    text: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "title": self.title, "text": self.text, "score": self.score}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Hit:
        return cls(str(d["doc_id"]), str(d["title"]), str(d["text"]), float(d["score"]))


class Corpus:
    """An ordered list of documents with an id index and a content fingerprint (the cache key)."""

    def __init__(self, documents: Iterable[Document], name: str = "corpus"):
        self.documents = list(documents)
        self.name = name
        if not self.documents:
            raise ConfigError(f"corpus {name!r} has no documents")
        self.index_of = {d.id: i for i, d in enumerate(self.documents)}
        if len(self.index_of) != len(self.documents):
            raise ConfigError(f"corpus {name!r} has duplicate document ids; ids must be unique")

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, doc_id: str) -> Document:
        return self.documents[self.index_of[doc_id]]

    @cached_property
    def fingerprint(self) -> str:
        h = hashlib.sha1()
        for d in self.documents:
            h.update(f"{d.id}\x00{d.title}\x00{d.text}\x01".encode())
        return h.hexdigest()[:16]

    def index_texts(self) -> list[str]:
        """What the retrievers index: title, then text."""
        return [f"{d.title}\n{d.text}" if d.title else d.text for d in self.documents]

    def hit(self, position: int, score: float) -> Hit:
        d = self.documents[position]
        return Hit(d.id, d.title, d.text, float(score))


_INDEXES: dict[tuple, Any] = {}
# one lock per index class: a long dense embedding must not hold up building a BM25 index
_LOCKS: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)


def shared_index(index_cls: type, corpus: Corpus, cache_dir: str | Path | None = None) -> Any:
    """The process-wide `index_cls(corpus, cache_dir=...)`, built on first use, so many envs share one."""
    key = (index_cls.__name__, corpus.fingerprint, str(cache_dir))
    with _LOCKS[index_cls.__name__]:
        if key not in _INDEXES:
            _INDEXES[key] = index_cls(corpus, cache_dir=cache_dir)
        return _INDEXES[key]


def _split_contents(contents: str) -> tuple[str, str]:
    first, _, rest = contents.partition("\n")
    if rest and len(first) < 300:
        return first.strip().strip('"'), rest.strip()
    return "", contents.strip()


def parse_document(obj: Any, line_no: int) -> Document:
    if not isinstance(obj, dict):
        raise ConfigError(f"line {line_no}: a document must be a JSON object with title/text or contents")
    doc_id = obj.get("id", obj.get("_id", obj.get("docid", line_no)))
    if "text" in obj or "title" in obj:
        title, text = str(obj.get("title") or ""), str(obj.get("text") or "")
    elif "contents" in obj:
        title, text = _split_contents(str(obj["contents"]))
    else:
        raise ConfigError(f"line {line_no}: document has neither 'text' nor 'contents' (keys: {', '.join(obj)})")
    return Document(str(doc_id), title, text)


def read_jsonl(path: str | Path) -> Iterable[tuple[int, Any]]:
    """(line number, parsed object) for each non-blank line; a bad line is a ConfigError naming it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no such file: {path}")
    with path.open(encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield no, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{no}: not valid JSON ({exc.msg})") from None


def load_corpus(path: str | Path, limit: int | None = None) -> Corpus:
    """A corpus from a JSONL file (see the module docstring for the accepted layouts)."""
    docs = []
    for no, obj in read_jsonl(path):
        docs.append(parse_document(obj, no))
        if limit is not None and len(docs) >= limit:
            break
    return Corpus(docs, name=Path(path).name)


_SOURCES: dict[str, Callable[[str], Corpus]] = {}


def register_corpus_source(name: str, build: Callable[[str], Corpus]) -> None:
    """Make `corpus_from_spec("NAME:ARG")` return `build("ARG")`; env families call this when registered."""
    _SOURCES[name] = build


def corpus_from_spec(spec: str) -> Corpus:
    """`NAME[:ARG]` of a registered source (e.g. `generated:SEED[:SIZE]`, from the search env) or a JSONL path."""
    name, _, arg = spec.partition(":")
    if name not in _SOURCES and not Path(spec).is_file():
        discover()  # the env registry loads the env families, which register their sources
    if name in _SOURCES:
        return _SOURCES[name](arg)
    return load_corpus(spec)
