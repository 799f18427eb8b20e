"""Asking a judge model: any OpenAI-compatible server, with caching, bounded concurrency, timeouts, retries.

`JudgeClient.shared(...)` returns one client per (backend, settings) for the whole process, so the
envs of a vector pool, each with its own rubric, still share one concurrency bound and one cache.
Identical requests are answered once: a repeat is served from the cache, and a duplicate that arrives
while the first is in flight waits for it instead of asking again. Transport errors, timeouts, 429 and
5xx answers are retried with exponential backoff; other 4xx answers are not (asking again won't help).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import httpx

from agentgym.errors import AgentGymError, ConfigError

Messages = Sequence[dict[str, str]]


class JudgeError(AgentGymError):
    """The judge gave no usable verdict (unreachable, timed out, or unparseable); the rubric records it."""


class JudgeBackend(Protocol):
    identity: str  # what the cache keys on besides the request: the server and model

    def complete(self, messages: Messages, *, temperature: float, max_tokens: int, timeout_s: float) -> str: ...


class _Retryable(Exception):
    pass


class OpenAIChatBackend:
    """`/v1/chat/completions` of an OpenAI-compatible server (vLLM, SGLang, llama.cpp, OpenAI itself)."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None):
        base = base_url.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ConfigError(f"judge server {base_url!r} must be an http(s) URL, e.g. openai:http://127.0.0.1:8000")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.model = model
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(headers=self._headers)
        self.identity = f"{self.base}#{model or ''}"

    def _model(self, timeout_s: float) -> str:
        if self.model is None:  # the server's first model, asked once
            answer = self._http.get(f"{self.base}/models", timeout=timeout_s)
            _raise_for_status(answer)
            self.model = answer.json()["data"][0]["id"]
        return self.model

    def complete(self, messages: Messages, *, temperature: float, max_tokens: int, timeout_s: float) -> str:
        body = {"model": self._model(timeout_s), "messages": list(messages), "temperature": temperature,
                "max_tokens": max_tokens}
        answer = self._http.post(f"{self.base}/chat/completions", json=body, timeout=timeout_s)
        _raise_for_status(answer)
        try:
            content = answer.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise JudgeError(f"the judge server's answer has no message content: {answer.text[:200]}") from exc
        return content or ""


def _raise_for_status(answer: httpx.Response) -> None:
    if answer.status_code == 429 or answer.status_code >= 500:
        raise _Retryable(f"HTTP {answer.status_code}: {answer.text[:200]}")
    if answer.status_code >= 400:
        raise JudgeError(f"the judge server refused the request: HTTP {answer.status_code}: {answer.text[:200]}")


class ScriptedBackend:
    """A judge whose replies come from a function of the messages (or a fixed list, in order): for exact tests
    and for rule-based judging that should still go through the same prompt, parsing and cache path."""

    def __init__(self, reply: Callable[[Messages], str] | Sequence[str], identity: str = "scripted"):
        if callable(reply):
            self._reply = reply
        else:
            replies, lock = list(reply), threading.Lock()

            def next_reply(_: Messages) -> str:
                with lock:
                    if not replies:
                        raise JudgeError("the scripted judge has no replies left")
                    return replies.pop(0)
            self._reply = next_reply
        self.identity = f"{identity}#{id(self)}"
        self.calls = 0

    def complete(self, messages: Messages, *, temperature: float, max_tokens: int, timeout_s: float) -> str:
        self.calls += 1
        return self._reply(messages)


def parse_backend(model: Any, model_name: str | None = None) -> JudgeBackend:
    """`openai:URL` (any OpenAI-compatible server) or a backend object."""
    if not isinstance(model, str):
        if not hasattr(model, "complete"):
            raise ConfigError(f"a judge model is 'openai:URL' or a backend with .complete(), got {model!r}")
        return model
    kind, sep, rest = model.partition(":")
    if kind != "openai" or not sep or not rest:
        raise ConfigError(f"unknown judge {model!r}; use 'openai:http://HOST:PORT' (any OpenAI-compatible server)")
    return OpenAIChatBackend(rest, model_name)


@dataclass(frozen=True)
class ClientSettings:
    max_concurrency: int = 4
    timeout_s: float = 60.0
    retries: int = 2
    backoff_s: float = 0.5
    cache_path: str | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ConfigError(f"judge max_concurrency must be >= 1, got {self.max_concurrency}")
        if not self.timeout_s > 0:
            raise ConfigError(f"judge timeout_s must be > 0, got {self.timeout_s}")
        if self.retries < 0:
            raise ConfigError(f"judge retries must be >= 0, got {self.retries}")


class JudgeClient:
    """Cached, bounded, retrying requests to one judge backend."""

    _shared: dict[tuple[str, ClientSettings], JudgeClient] = {}
    _shared_lock = threading.Lock()

    def __init__(self, backend: JudgeBackend, settings: ClientSettings = ClientSettings()):
        self.backend, self.settings = backend, settings
        self._slots = threading.BoundedSemaphore(settings.max_concurrency)
        self._lock = threading.Lock()
        self._cache: dict[str, str] = {}
        self._inflight: dict[str, Future] = {}
        self.requests = 0          # requests that reached the backend (attempts, retries included)
        self.cache_hits = 0
        if settings.cache_path:
            self._load_cache(Path(settings.cache_path))

    @classmethod
    def shared(cls, backend: JudgeBackend, settings: ClientSettings) -> JudgeClient:
        key = (backend.identity, settings)
        with cls._shared_lock:
            if key not in cls._shared:
                cls._shared[key] = cls(backend, settings)
            return cls._shared[key]

    @staticmethod
    def key(identity: str, messages: Messages, temperature: float, max_tokens: int) -> str:
        blob = json.dumps([identity, list(messages), temperature, max_tokens], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def ask(self, messages: Messages, temperature: float = 0.0, max_tokens: int = 256, cache: bool = True) -> str:
        """The judge's reply text; raises JudgeError when every attempt failed."""
        key = self.key(self.backend.identity, messages, temperature, max_tokens)
        with self._lock:
            if cache and key in self._cache:
                self.cache_hits += 1
                return self._cache[key]
            waiting = self._inflight.get(key) if cache else None
            if waiting is None:
                mine: Future = Future()
                if cache:
                    self._inflight[key] = mine
        if waiting is not None:  # the same question is being asked right now: share its answer
            self.cache_hits += 1
            return waiting.result()
        try:
            text = self._ask_with_retries(messages, temperature, max_tokens)
        except BaseException as exc:
            mine.set_exception(exc)
            with self._lock:
                self._inflight.pop(key, None)
            raise
        with self._lock:
            if cache:
                self._cache[key] = text
                self._inflight.pop(key, None)
                self._append_cache(key, text)
        mine.set_result(text)
        return text

    def _ask_with_retries(self, messages: Messages, temperature: float, max_tokens: int) -> str:
        s, last = self.settings, ""
        for attempt in range(s.retries + 1):
            if attempt:
                time.sleep(s.backoff_s * 2 ** (attempt - 1))
            with self._slots:
                with self._lock:
                    self.requests += 1
                try:
                    return self.backend.complete(messages, temperature=temperature, max_tokens=max_tokens,
                                                 timeout_s=s.timeout_s)
                except JudgeError:
                    raise
                except httpx.TimeoutException:
                    last = f"no answer within {s.timeout_s:g} s"
                except (_Retryable, httpx.HTTPError, OSError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
        raise JudgeError(f"judge {self.backend.identity.split('#')[0]} failed after {s.retries + 1} attempt(s): "
                         f"{last}")

    # a JSON-lines file of {key, text}: judgements survive restarts and are shared between runs
    def _load_cache(self, path: Path) -> None:
        if not path.is_file():
            return
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                self._cache[row["key"]] = row["text"]
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line from a killed run

    def _append_cache(self, key: str, text: str) -> None:
        if self.settings.cache_path:
            path = Path(self.settings.cache_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"key": key, "text": text}, ensure_ascii=False) + "\n")
