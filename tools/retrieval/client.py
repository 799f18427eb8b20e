"""httpx clients of the retrieval server, sync and async, with timeouts and retries.

Connection errors, timeouts and 5xx answers are retried with exponential backoff; a 4xx answer is the
caller's mistake and raises `RetrievalError` at once with the server's message.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from agentgym.tools.retrieval.corpus import Hit, RetrievalError

_RETRYABLE = (httpx.TransportError,)


def _check(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise RetrievalError(f"retrieval server answered {response.status_code}: {detail}")
    return response.json()


class _Base:
    def __init__(self, url: str, method: str = "bm25", timeout_s: float = 10.0, retries: int = 3,
                 backoff_s: float = 0.1):
        self.url = url.rstrip("/")
        self.method = method
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s

    def _failed(self, attempt: int, exc: Exception | None, response: httpx.Response | None) -> bool:
        """Whether to try again; raises once the retries are spent."""
        retry = exc is not None or (response is not None and response.status_code >= 500)
        if retry and attempt >= self.retries:
            why = f"{type(exc).__name__}: {exc}" if exc else f"HTTP {response.status_code}"  # type: ignore[union-attr]
            raise RetrievalError(f"retrieval server at {self.url} failed after {attempt + 1} attempt(s) ({why}); "
                                 "is it running? Start it with `agentgym serve retrieval --corpus ...`")
        return retry


class RetrievalClient(_Base):
    """Blocking client; one connection pool per client, safe to share between threads."""

    def __init__(self, url: str, method: str = "bm25", timeout_s: float = 10.0, retries: int = 3,
                 backoff_s: float = 0.1):
        super().__init__(url, method, timeout_s, retries, backoff_s)
        self._http = httpx.Client(timeout=timeout_s)

    def _request(self, verb: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        for attempt in range(self.retries + 1):
            exc, response = None, None
            try:
                response = self._http.request(verb, self.url + path, json=body)
            except _RETRYABLE as error:
                exc = error
            if not self._failed(attempt, exc, response):
                return _check(response)  # type: ignore[arg-type]
            time.sleep(self.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def search(self, query: str, k: int = 3) -> list[Hit]:
        data = self._request("POST", "/search", {"query": query, "k": k, "method": self.method})
        return [Hit.from_dict(h) for h in data["hits"]]

    def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        data = self._request("POST", "/batch_search", {"queries": list(queries), "k": k, "method": self.method})
        return [[Hit.from_dict(h) for h in hits] for hits in data["results"]]

    def close(self) -> None:
        self._http.close()


class AsyncRetrievalClient(_Base):
    """Asyncio client for async rollouts: `await client.search(query, k)`."""

    def __init__(self, url: str, method: str = "bm25", timeout_s: float = 10.0, retries: int = 3,
                 backoff_s: float = 0.1):
        super().__init__(url, method, timeout_s, retries, backoff_s)
        self._http = httpx.AsyncClient(timeout=timeout_s)

    async def _request(self, verb: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        for attempt in range(self.retries + 1):
            exc, response = None, None
            try:
                response = await self._http.request(verb, self.url + path, json=body)
            except _RETRYABLE as error:
                exc = error
            if not self._failed(attempt, exc, response):
                return _check(response)  # type: ignore[arg-type]
            await asyncio.sleep(self.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    async def health(self) -> dict[str, Any]:
        return await self._request("GET", "/health")

    async def search(self, query: str, k: int = 3) -> list[Hit]:
        data = await self._request("POST", "/search", {"query": query, "k": k, "method": self.method})
        return [Hit.from_dict(h) for h in data["hits"]]

    async def search_batch(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        data = await self._request("POST", "/batch_search", {"queries": list(queries), "k": k, "method": self.method})
        return [[Hit.from_dict(h) for h in hits] for hits in data["results"]]

    async def aclose(self) -> None:
        await self._http.aclose()
