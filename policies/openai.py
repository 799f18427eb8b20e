"""`openai`: any OpenAI-compatible completions server (vLLM, SGLang, llama.cpp) over httpx.

Token in, token out needs the server to take the prompt as token ids and to give back the sampled token
ids. vLLM and SGLang do: the prompt goes as a list of ids to `/v1/completions`, and the sampled ids come
back in `choices[i].token_ids` (vLLM `return_token_ids`) or as `"token_id:N"` strings in
`logprobs.tokens` (vLLM `return_tokens_as_token_ids`). A server that cannot (llama-cpp-python's server
takes only text prompts and returns token strings) raises a PolicyError that says so, unless the policy
was built with `retokenize=True` and a tokenizer: then the prompt goes as its decoded text and the
returned text is tokenised locally. That breaks token-in-token-out (the ids trained on may differ from
the ids sampled), so every such Generation has `retokenized=True` and a warning is logged once.

Logprobs are what the server reports for the sampled token: vLLM's default is the raw model
distribution (temperature 1; `--logprobs-mode processed_logprobs` gives the tempered one, which is
what the `hf` policy records), llama.cpp's are of the raw logits. Missing values are NaN.

Failures never hang a rollout: each request has a timeout, 429/5xx and connection errors are retried
with bounded exponential backoff, and a request that still fails comes back as a Generation with
`finish_reason="error"` and the reason in `error`; the rest of the batch is unaffected.

Several servers (a list of base URLs, or one string with commas): each attempt goes to the up server
with the fewest requests outstanding; a connection error or 5xx marks that server down for `down_s`
seconds and the request is retried at once on another one; after `down_s` the server is tried again
and is up again on its first answer.
"""
from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import httpx

from agentgym.errors import PolicyError
from agentgym.policies.base import BasePolicy, Generation, GenerationRequest, SamplingParams

log = logging.getLogger(__name__)
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class OpenAIGeneration(Generation):
    """A Generation that also says whether its token ids came from re-tokenising the server's text."""

    retokenized: bool = False


@dataclass
class ServerState:
    """One inference server as the policy sees it (mutated on the policy's event loop only)."""

    url: str                  # ".../v1"
    outstanding: int = 0
    answered: int = 0
    failures: int = 0
    down_until: float = 0.0   # time.monotonic() before which it is not picked while another is up

    def is_up(self, now: float) -> bool:
        return self.down_until <= now


def server_urls(base_url: str | Sequence[str]) -> list[str]:
    """Normalised ".../v1" URLs of one URL, a comma-separated string or a list; PolicyError if bad."""
    raw = base_url.split(",") if isinstance(base_url, str) else list(base_url)
    urls = [u.strip().rstrip("/") for u in raw if u and u.strip()]
    if not urls:
        raise PolicyError("openai policy needs at least one base URL, e.g. http://127.0.0.1:8000")
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise PolicyError(f"openai base URL must start with http:// or https://, got {u!r}")
    return [u if u.endswith("/v1") else u + "/v1" for u in urls]


def pick_server(servers: Sequence[ServerState], now: float, avoid: set[str]) -> ServerState:
    """Least-outstanding among up servers not yet tried for this request; else among up ones; else the
    one whose down time ends first (a request is never refused just because every server looks down)."""
    up = [s for s in servers if s.is_up(now)]
    fresh = [s for s in up if s.url not in avoid]
    pool = fresh or up
    if not pool:
        return min(servers, key=lambda s: s.down_until)
    return min(pool, key=lambda s: (s.outstanding, s.answered))


class _Unsupported(Exception):
    """The server cannot do what token-in-token-out needs (ids in or ids out)."""


def completion_body(model: str, request: GenerationRequest, prompt: list[int] | str) -> dict[str, Any]:
    """The /v1/completions JSON for one request, with vLLM's token-id extensions (others ignore them)."""
    s: SamplingParams = request.sampling
    body: dict[str, Any] = {
        "model": model, "prompt": prompt, "max_tokens": s.max_tokens, "temperature": s.temperature,
        "top_p": s.top_p, "logprobs": 1, "n": 1, "stream": False,
        # vLLM: sampled ids back, special tokens kept, stop string kept (as the hf policy does)
        "return_token_ids": True, "return_tokens_as_token_ids": True,
        "skip_special_tokens": False, "include_stop_str_in_output": True,
    }
    if s.stop:
        body["stop"] = list(s.stop)
    if s.seed is not None:
        body["seed"] = int(s.seed)
    return body


def parse_token_ids(choice: dict[str, Any]) -> list[int] | None:
    """The sampled token ids of a completion choice, where the server gave them; else None."""
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
        return ids
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and tokens and all(isinstance(t, str) and t.startswith("token_id:")
                                                   for t in tokens):
        return [int(t.split(":", 1)[1]) for t in tokens]
    return None


def parse_logprobs(choice: dict[str, Any], count: int) -> tuple[float, ...] | None:
    """Sampled-token logprobs (completions API `token_logprobs`), if there is one per token."""
    values = (choice.get("logprobs") or {}).get("token_logprobs")
    if not isinstance(values, list) or len(values) != count:
        return None
    return tuple(float(v) if v is not None else math.nan for v in values)


def backoff_delay(attempt: int, base: float, cap: float, retry_after: str | None = None) -> float:
    """Exponential backoff with jitter; a server's Retry-After (seconds) wins, within the cap."""
    if retry_after:
        try:
            return min(cap, max(0.0, float(retry_after)))
        except ValueError:
            pass
    return min(cap, base * (2 ** attempt)) * (0.5 + random.random() / 2)


def error_generation(message: str) -> OpenAIGeneration:
    return OpenAIGeneration((), "", (), "error", message)


class OpenAIPolicy(BasePolicy):
    """Batched async client for an OpenAI-compatible `/v1/completions` endpoint."""

    def __init__(self, base_url: str | Sequence[str], model: str | None = None, tokenizer: Any = None, *,
                 max_concurrency: int = 16, timeout: float = 120.0, connect_timeout: float = 10.0,
                 max_retries: int = 4, backoff: float = 0.5, max_backoff: float = 8.0,
                 api_key: str | None = None, retokenize: bool = False,
                 transport: httpx.AsyncBaseTransport | None = None, down_s: float = 10.0) -> None:
        self.servers = [ServerState(u) for u in server_urls(base_url)]
        self.down_s = down_s
        if retokenize and tokenizer is None:
            raise PolicyError("retokenize=True needs a local tokenizer (tokenizer=...) of the served model")
        if max_concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise PolicyError("need max_concurrency >= 1, max_retries >= 0 and timeout > 0")
        self.base_url = self.servers[0].url  # the first server (messages, model discovery)
        self.model, self.tokenizer, self.retokenize = model, tokenizer, retokenize
        self.max_concurrency, self.max_retries = max_concurrency, max_retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self.timeout = httpx.Timeout(timeout, connect=min(connect_timeout, timeout))
        self.request_timeout = timeout
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.transport = transport
        self.text_prompts = False  # set once the server has refused token-id prompts
        self._warned = False
        self._gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def chat_format(self) -> Any:
        if self.tokenizer is None:
            raise PolicyError("the openai policy needs tokenizer=... (the served model's HF tokenizer) "
                              "to build token-id prompts")
        from agentgym.chat import ChatFormat  # lazy: only the rollout needs it

        return ChatFormat.from_tokenizer(self.tokenizer)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Sync wrapper: runs `agenerate` on a fresh event loop (in a thread if one is running here)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate(requests))
        box: list[Any] = []
        thread = threading.Thread(target=lambda: box.append(asyncio.run(self.agenerate(requests))))
        thread.start()
        thread.join()
        return box[0]

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        limits = httpx.Limits(max_connections=self.max_concurrency)
        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers, limits=limits,
                                     transport=self.transport) as client:
            if self.model is None:
                self.model = await self._discover_model(client)
            gate = self._gate()
            results = await asyncio.gather(*[self._one(client, gate, r) for r in requests],
                                           return_exceptions=True)
        for result in results:  # after every request is done, so nothing is left running
            if isinstance(result, BaseException):
                raise result
        return list(results)

    def _gate(self) -> asyncio.Semaphore:
        """One semaphore per event loop, so concurrent `agenerate` calls share the concurrency limit."""
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.max_concurrency)
        return gate

    async def _discover_model(self, client: httpx.AsyncClient) -> str:
        """The first served model's id (servers that serve one model accept any name anyway)."""
        try:
            response = await client.get(f"{self.base_url}/models")
            return str(response.json()["data"][0]["id"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return "default"

    async def _one(self, client: httpx.AsyncClient, gate: asyncio.Semaphore,
                   request: GenerationRequest) -> Generation:
        if not request.prompt_ids:
            return error_generation("empty prompt: the openai policy needs prompt token ids")
        async with gate:
            try:
                choice = await self._complete(client, request)
            except _Unsupported as exc:
                raise PolicyError(str(exc)) from None
            except _Failed as exc:
                return error_generation(str(exc))
        return self._to_generation(request, choice)

    def _prompt(self, request: GenerationRequest) -> list[int] | str:
        if not self.text_prompts:
            return list(request.prompt_ids)
        return self.tokenizer.decode(list(request.prompt_ids), skip_special_tokens=False)

    async def _complete(self, client: httpx.AsyncClient, request: GenerationRequest) -> dict[str, Any]:
        """POST with retries (on another server where there is one); returns the first choice or raises
        _Failed / _Unsupported."""
        last, wait, retry_after, tried = "no attempt made", False, None, set()
        for attempt in range(self.max_retries + 1):
            if wait:
                await asyncio.sleep(backoff_delay(attempt - 1, self.backoff, self.max_backoff, retry_after))
            wait, retry_after = True, None
            server = pick_server(self.servers, time.monotonic(), tried)
            body = completion_body(self.model or "default", request, self._prompt(request))
            server.outstanding += 1
            try:  # httpx times each phase; wait_for also bounds a server that trickles bytes forever
                response = await asyncio.wait_for(client.post(f"{server.url}/completions", json=body),
                                                  self.request_timeout)
            except (httpx.TransportError, asyncio.TimeoutError) as exc:  # the server may come back
                last = f"{server.url}: {type(exc).__name__}: {exc or 'no answer within the timeout'}"
                wait = self._mark_down(server, tried)
                continue
            finally:
                server.outstanding -= 1
            if response.status_code == 200:
                server.answered += 1
                server.down_until = 0.0  # up (again)
                return self._first_choice(response)
            last = f"{server.url}: HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code >= 500 and not self._rejects_id_prompt(response, body):
                retry_after = response.headers.get("retry-after")
                wait = self._mark_down(server, tried)
                continue
            if self._rejects_id_prompt(response, body):
                self._fall_back_to_text(response)
                wait = False  # not a failure: resend at once as text
                continue
            if response.status_code in RETRY_STATUS:
                retry_after = response.headers.get("retry-after")
                continue
            raise _Failed(f"server refused the request ({last})")
        where = self.base_url if len(self.servers) == 1 else f"{len(self.servers)} servers"
        raise _Failed(f"gave up after {self.max_retries + 1} attempts to {where}: {last}")

    def _mark_down(self, server: ServerState, tried: set[str]) -> bool:
        """Mark `server` down; True if the next attempt must back off (no other server is up)."""
        server.failures += 1
        server.down_until = time.monotonic() + self.down_s
        tried.add(server.url)
        now = time.monotonic()
        return not any(s.is_up(now) and s.url not in tried for s in self.servers)

    @staticmethod
    def _first_choice(response: httpx.Response) -> dict[str, Any]:
        try:
            return response.json()["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Failed(f"malformed completions response ({exc!r}): {response.text[:200]}") from None

    @staticmethod
    def _rejects_id_prompt(response: httpx.Response, body: dict[str, Any]) -> bool:
        """A schema error about `prompt` for an id-list prompt (llama-cpp-python answers it with a 500)."""
        text = response.text.lower()
        return (isinstance(body["prompt"], list) and "prompt" in text
                and (response.status_code in (400, 422)
                     or (response.status_code == 500 and "validation error" in text)))

    def _fall_back_to_text(self, response: httpx.Response) -> None:
        if not self.retokenize:
            raise _Unsupported(
                f"{self.base_url} does not accept token-id prompts ({response.text[:160]!r}), so token-in-"
                f"token-out is impossible with it: serve the model with vLLM or SGLang, or build the policy "
                f"with retokenize=True and tokenizer=... to accept re-tokenised text (breaks exact tokens)")
        self._warn_once("does not accept token-id prompts; sending decoded text")
        self.text_prompts = True

    def _warn_once(self, what: str) -> None:
        if not self._warned:
            log.warning("openai policy: %s %s; token ids are RE-TOKENISED locally (retokenized=True on "
                        "each Generation): training tokens may differ from sampled tokens", self.base_url, what)
            self._warned = True

    def _to_generation(self, request: GenerationRequest, choice: dict[str, Any]) -> Generation:
        text = choice.get("text") or ""
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        ids = parse_token_ids(choice)
        retokenized = ids is None
        if ids is None:
            if not self.retokenize:
                raise PolicyError(
                    f"{self.base_url} returned no token ids (neither `token_ids` nor 'token_id:N' logprob "
                    f"tokens): use vLLM/SGLang, or build the policy with retokenize=True and tokenizer=...")
            self._warn_once("returns no token ids")
            return self._retokenized(choice, text, finish, request)
        logprobs = parse_logprobs(choice, len(ids)) or tuple([math.nan] * len(ids))
        return OpenAIGeneration(tuple(ids), text, logprobs, finish, None, retokenized)

    def _retokenized(self, choice: dict[str, Any], text: str, finish: str,
                     request: GenerationRequest) -> OpenAIGeneration:
        """Local ids for the server's text; an EOS is appended where the server stopped on one.

        Logprobs are the server's where its token count matches the local one, else NaN (unknown).
        """
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        logprobs = parse_logprobs(choice, len(ids)) or tuple([math.nan] * len(ids))
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if finish == "stop" and not request.sampling.stop and isinstance(eos, int):
            ids.append(eos)  # servers drop the EOS from the text; the trainer must still see it
            logprobs += (math.nan,)
        return OpenAIGeneration(tuple(ids), text, logprobs, finish, None, True)


class _Failed(Exception):
    """A request failed for good (after retries, or with a non-retryable status)."""
