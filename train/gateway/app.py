"""The gateway over HTTP: a Starlette app (OpenAI's /v1 routes plus sessions) and a uvicorn server thread.

    POST /v1/chat/completions           the harness's calls (stream: token by token where the engine reports
                                        its tokens); session = API key or X-Session-Id
    GET  /v1/models                     the one model served
    POST /v1/sessions                   open one: {"task"?, "group"?, "sample"?} -> {"id", "api_key"}
    GET  /v1/sessions/{id}              its calls, segments, rewards, status
    POST /v1/sessions/{id}/reward       {"reward", "call"? (0-based; -1 the last), "success"?}
    POST /v1/sessions/{id}/close        {"reward"?, "success"?, "error"?}; calls after it get 409
    GET  /health

Errors are OpenAI's shape ({"error": {"message", "type", "param", "code"}}), so the official client raises
its own exception classes (401 AuthenticationError for an unknown session, 409 ConflictError after close,
400 BadRequestError for a bad request or tool schema, 413 for an oversized body, 429 RateLimitError, which
it retries). Why Starlette here and not the standard library's server (as the env server uses): a gateway
holds many callers waiting on one engine at once, which an event loop does with no thread per caller, and it
must notice a caller hanging up while its call waits.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import threading
import time
from typing import Any

from agentgym.errors import ConfigError, require
from agentgym.train.gateway.merge import session_summary
from agentgym.train.gateway.protocol import (GatewayError, TextDeltas, completion_body, parse_chat_request,
                                             stream_chunks, stream_tail, streams_tokens, text_chunk)
from agentgym.train.gateway.service import ClientGone, Gateway


def _error(exc: GatewayError) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(exc.body(), status_code=exc.status)


async def _body(request: Any, limit: int) -> Any:
    """The JSON body, refusing one over `limit` bytes before reading it where Content-Length says so."""
    declared = request.headers.get("content-length")
    too_large = GatewayError(413, f"the request body is larger than {limit} bytes (--max-body-mb)",
                             code="request_too_large")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise GatewayError(400, f"the body is not JSON: {exc}", code="invalid_json") from exc


def _gone() -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": "client closed the request", "type": "client_closed", "param": None,
                                   "code": None}}, status_code=499)


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data)}\n\n"


async def token_stream(gateway: Gateway, sid: str | None, body: Any, disconnected: Any) -> Any:
    """A streamed call sent token by token as the engine samples it. The response starts with the first token,
    so a call refused before any (unknown session, a bad request, the engine busy) still answers with its
    OpenAI error status; an error after it is the stream's last event ({"error": ...}, which the official
    client raises as an APIError). A reader that goes away cancels the call, which is then not recorded."""
    from starlette.responses import StreamingResponse

    loop = asyncio.get_running_loop()
    tokens: asyncio.Queue[int] = asyncio.Queue()

    def heard(token: int) -> None:   # called from the engine's thread
        loop.call_soon_threadsafe(tokens.put_nowait, token)

    task = asyncio.ensure_future(gateway.complete(sid, body, disconnected, heard))
    first = asyncio.ensure_future(tokens.get())
    await asyncio.wait({task, first}, return_when=asyncio.FIRST_COMPLETED)
    if not first.done():
        first.cancel()
        try:
            answer, parsed = task.result()   # refused or failed before any token: a plain error response
        except ClientGone:
            return _gone()
        whole = [_sse(c) for c in stream_chunks(answer, parsed.include_usage)]   # no token came: sent whole
        return StreamingResponse(iter([*whole, "data: [DONE]\n\n"]), media_type="text/event-stream")
    cid, created = f"chatcmpl-{secrets.token_hex(12)}", int(time.time())
    head = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": gateway.config.model}

    async def events() -> Any:
        deltas = TextDeltas(gateway.chat.decode)
        pending = [first.result()]
        try:
            yield _sse(text_chunk(head, {"role": "assistant", "content": ""}))
            while True:
                for token in pending:
                    delta = deltas.push(token)
                    if delta:
                        yield _sse(text_chunk(head, {"content": delta}))
                if task.done() and tokens.empty():
                    break
                getter = asyncio.ensure_future(tokens.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                pending = [getter.result()] if getter.done() and not getter.cancelled() else []
                while not tokens.empty():
                    pending.append(tokens.get_nowait())
            try:
                answer, parsed = task.result()
            except GatewayError as exc:
                yield _sse(exc.body())
                return
            except ClientGone:
                return
            answer = dataclasses.replace(answer, id=cid, created=created)
            for chunk in stream_tail(answer, deltas.rest(answer.content or ""), parsed.include_usage):
                yield _sse(chunk)
            yield "data: [DONE]\n\n"
        finally:
            if not task.done():
                task.cancel()

    return StreamingResponse(events(), media_type="text/event-stream")


def session_id_of(request: Any) -> str | None:
    """The X-Session-Id header, else the bearer API key."""
    sid = request.headers.get("x-session-id")
    if sid:
        return sid.strip()
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def _optional(body: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) and kind is not bool or not isinstance(value, kind)):
        raise GatewayError(400, f"{key} must be {getattr(kind, '__name__', 'a number')}, got {value!r}", param=key)
    return value


def create_app(gateway: Gateway) -> Any:
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    limit = gateway.config.max_body_bytes

    async def chat_completions(request: Any) -> Any:
        body = await _body(request, limit)

        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        if streams_tokens(parse_chat_request(body, gateway.config.max_new_tokens), gateway.engine.streams):
            return await token_stream(gateway, session_id_of(request), body, disconnected)
        try:
            answer, parsed = await gateway.complete(session_id_of(request), body, disconnected)
        except ClientGone:  # nobody reads this; the connection is gone
            return _gone()
        if not parsed.stream:
            return JSONResponse(completion_body(answer))
        events = [f"data: {json.dumps(c)}\n\n" for c in stream_chunks(answer, parsed.include_usage)]
        return StreamingResponse(iter([*events, "data: [DONE]\n\n"]), media_type="text/event-stream")

    async def models(request: Any) -> Any:
        return JSONResponse({"object": "list", "data": [{"id": gateway.config.model, "object": "model",
                                                          "created": 0, "owned_by": "agentgym"}]})

    async def open_session(request: Any) -> Any:
        body = await _body(request, limit)
        if not isinstance(body, dict):
            raise GatewayError(400, "the body must be a JSON object")
        session = gateway.open_session(body.get("task"), int(_optional(body, "group", int) or 0),
                                       int(_optional(body, "sample", int) or 0))
        return JSONResponse({"id": session.id, "api_key": session.id, "object": "session"})

    async def show(request: Any) -> Any:
        return JSONResponse(session_summary(gateway.session(request.path_params["sid"])))

    async def reward(request: Any) -> Any:
        body = await _body(request, limit)
        if not isinstance(body, dict) or _optional(body, "reward", (int, float)) is None:
            raise GatewayError(400, "the body must be {\"reward\": number, \"call\"?: int, \"success\"?: bool}",
                               param="reward")
        session = gateway.reward(request.path_params["sid"], float(body["reward"]), _optional(body, "call", int),
                                 _optional(body, "success", bool))
        return JSONResponse(session_summary(session))

    async def close(request: Any) -> Any:
        body = await _body(request, limit)
        if not isinstance(body, dict):
            raise GatewayError(400, "the body must be a JSON object")
        value = _optional(body, "reward", (int, float))
        session = gateway.close_session(request.path_params["sid"], None if value is None else float(value),
                                        _optional(body, "success", bool), _optional(body, "error", str))
        return JSONResponse(session_summary(session))

    async def health(request: Any) -> Any:
        return JSONResponse({"status": "ok", "sessions": gateway.store.counts(), "served": gateway.served,
                             "batches": gateway.engine.batches, "rows": gateway.engine.rows})

    async def gateway_error(request: Any, exc: Exception) -> Any:
        return _error(exc)  # type: ignore[arg-type]

    async def http_error(request: Any, exc: Any) -> Any:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse({"error": {"message": f"{request.method} {request.url.path}: {exc.detail}", "type": kind,
                                       "param": None, "code": None}}, status_code=exc.status_code)

    async def server_error(request: Any, exc: Exception) -> Any:  # a bug answers 500, it never kills the gateway
        return JSONResponse({"error": {"message": f"{type(exc).__name__}: {exc}", "type": "server_error",
                                       "param": None, "code": None}}, status_code=500)

    routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]),
              Route("/v1/sessions", open_session, methods=["POST"]),
              Route("/v1/sessions/{sid}", show, methods=["GET"]),
              Route("/v1/sessions/{sid}/reward", reward, methods=["POST"]),
              Route("/v1/sessions/{sid}/close", close, methods=["POST"]),
              Route("/health", health, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={GatewayError: gateway_error, HTTPException: http_error,
                                                        Exception: server_error})


class GatewayServer:
    """uvicorn serving `create_app(gateway)` on loopback in a daemon thread; `url` is the OpenAI base URL."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0):
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be between 0 and 65535, got {port}")
        require("starlette", "web")
        uvicorn = require("uvicorn", "web")
        self.gateway = gateway
        config = uvicorn.Config(create_app(gateway), host=host, port=port, log_level="warning", access_log=False,
                                lifespan="off", timeout_keep_alive=30)
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # not the main thread
        self.host = host
        self.port = port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def start(self, timeout: float = 30.0) -> "GatewayServer":
        self._thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), name="gateway-http",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the gateway could not listen on {self.host}:{self.port} (in use? try --port 0)")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def wait(self) -> None:
        """Block until the server stops (the CLI; Ctrl-C raises KeyboardInterrupt here)."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> "GatewayServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
