"""A synchronous handle on one MCP server, over the `mcp` SDK's `Client`.

Envs step from plain threads, the SDK is async: each `MCPSession` runs its own asyncio loop in a daemon
thread, enters `mcp.Client` there once (the connection and, for stdio, the server process live as long
as the session), and answers `list_tools` / `call_tool` from any thread. Every call has a timeout; a
server that dies turns the session `dead` with the reason (and the tail of the server's stderr), so the
env can end the episode and start a fresh server on the next reset. `close()` stops everything it
started and may be called twice; an HTTP server this session launched runs in its own process group
and is killed with it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from agentgym.errors import AgentGymError, require
from agentgym.tools.mcp.server_spec import MCPServerSpec

GRACE_S = 5.0  # the outer wait beyond the SDK's own per-call timeout, so the SDK's clean error comes first
GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.py")


def guarded(command: tuple[str, ...]) -> list[str]:
    """The command run under guard.py, which stops it if this process dies without closing the session."""
    return [sys.executable, GUARD, "--", *command]


class MCPConnectionError(AgentGymError):
    """The MCP server could not be started or reached, or it died; the message says which and why."""


@dataclass(frozen=True)
class MCPCallOutcome:
    """What one `tools/call` gave back: the text the model sees, and whether the server flagged an error."""

    text: str
    is_error: bool
    structured: Any = None
    seconds: float = 0.0


def _field(obj: Any, snake: str, camel: str, default: Any = None) -> Any:
    """SDK 2 names fields in snake_case, SDK 1 in camelCase; read either."""
    return getattr(obj, snake, getattr(obj, camel, default))


def content_text(block: Any) -> str:
    """One MCP content block as text for the model: text as is, other kinds as a short description."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind}: {_field(block, 'mime_type', 'mimeType', '?')}, {len(block.data) * 3 // 4} bytes]"
    if kind == "resource":
        inner = block.resource
        text = getattr(inner, "text", None)
        return text if text is not None else f"[resource {inner.uri}: {_field(inner, 'mime_type', 'mimeType', '')}]"
    if kind == "resource_link":
        return f"[resource link {block.uri}: {getattr(block, 'description', '') or block.name}]"
    return f"[{kind or type(block).__name__} content]"


def outcome_of(result: Any, seconds: float) -> MCPCallOutcome:
    """A `CallToolResult` as text: its content blocks joined, or its structured content as JSON."""
    structured = _field(result, "structured_content", "structuredContent")
    parts = [content_text(b) for b in (result.content or [])]
    text = "\n".join(parts) if parts else (json.dumps(structured, default=str) if structured is not None else "")
    return MCPCallOutcome(text, bool(_field(result, "is_error", "isError", False)), structured, seconds)


def _port_open(url: str) -> bool:
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class MCPSession:
    """One live connection to one MCP server (see the module docstring)."""

    def __init__(self, spec: MCPServerSpec):
        require("mcp", "mcp")
        self.spec = spec
        self.dead: str | None = None          # why the server is unusable, once it is
        self._closed = False
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"mcp {spec.label}")
        self._thread.start()
        try:
            if spec.url and spec.command:
                self._launch_http_server()
            future = asyncio.run_coroutine_threadsafe(self._open(), self._loop)
            try:
                future.result(spec.startup_timeout_s)
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise MCPConnectionError(f"MCP server {spec.label!r} did not answer within "
                                         f"{spec.startup_timeout_s:g} s{self._stderr_tail()}") from None
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifetime
    def _launch_http_server(self) -> None:
        env = {**os.environ, **self.spec.env}
        # Through the guard, in a process group of its own: the server goes when we close, exit or are killed.
        self._proc = subprocess.Popen(guarded(self.spec.command), cwd=self.spec.cwd, env=env,
                                      stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
                                      start_new_session=True)
        deadline = time.monotonic() + self.spec.startup_timeout_s
        while not _port_open(self.spec.url):
            if self._proc.poll() is not None:
                raise MCPConnectionError(f"MCP server {self.spec.label!r} exited with code {self._proc.returncode} "
                                         f"before serving {self.spec.url}{self._stderr_tail()}")
            if time.monotonic() > deadline:
                raise MCPConnectionError(f"MCP server {self.spec.label!r} did not open {self.spec.url} within "
                                         f"{self.spec.startup_timeout_s:g} s{self._stderr_tail()}")
            time.sleep(0.05)

    def _transport(self) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        if self.spec.url:
            return streamable_http_client(self.spec.url)
        command, *args = guarded(self.spec.command)  # the SDK puts it in a process group of its own
        params = StdioServerParameters(command=command, args=args, env=self.spec.env or None, cwd=self.spec.cwd)
        return stdio_client(params, errlog=self._stderr)

    async def _open(self) -> None:
        self._stop = asyncio.Event()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._lifetime(ready))
        try:
            await ready
        except asyncio.CancelledError:  # startup timed out: unwind the connection (it stops the process)
            self._task.cancel()
            raise

    async def _lifetime(self, ready: asyncio.Future) -> None:
        """Holds the SDK client open (its context must be entered and left in one task) until `close`."""
        from mcp import Client

        try:
            async with Client(self._transport()) as client:
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - any way the connection ends is recorded, never raised here
            reason = _describe(exc)
            if not ready.done():
                ready.set_exception(MCPConnectionError(f"could not connect to MCP server {self.spec.label!r}: "
                                                       f"{reason}{self._stderr_tail()}"))
            elif not self._closed:
                self.dead = self.dead or reason
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    def close(self) -> None:
        """Disconnect and stop every process this session started; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._loop.is_running() and self._task is not None:
            async def finish() -> None:
                self._stop.set()
                try:
                    await asyncio.wait_for(asyncio.shield(self._task), 10.0)
                except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                    self._task.cancel()
                    await asyncio.wait({self._task}, timeout=5.0)
            try:
                asyncio.run_coroutine_threadsafe(finish(), self._loop).result(20.0)
            except Exception:  # noqa: BLE001 - closing must not raise
                pass
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()
        self._kill_launched()
        self._stderr.close()

    def _kill_launched(self) -> None:
        """SIGTERM to the launched group (guard and server), SIGKILL to whatever is left after a grace period."""
        if self._proc is None:
            return
        group = self._proc.pid  # the guard leads the group (start_new_session)
        for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                self._proc.poll()  # reap the guard, or the group never looks empty
                try:
                    os.killpg(group, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.02)
            else:
                continue
            break
        self._proc.poll()

    def __enter__(self) -> MCPSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten session must not leave a server behind
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # ------------------------------------------------------------------ requests
    def _run(self, coro: Any, timeout_s: float) -> Any:
        if self._closed:
            coro.close()
            raise MCPConnectionError(f"MCP session for {self.spec.label!r} is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s + GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer from the MCP server within {timeout_s:g} s") from None

    def _check_alive(self) -> None:
        if self._closed:
            raise MCPConnectionError(f"MCP session for {self.spec.label!r} is closed")
        if self.dead is None and self._proc is not None and self._proc.poll() is not None:
            self.dead = f"the server process exited with code {self._proc.returncode}"
        if self.dead is not None:
            raise MCPConnectionError(f"MCP server {self.spec.label!r} is gone ({self.dead}){self._stderr_tail()}")
        if self._client is None:
            raise MCPConnectionError(f"MCP server {self.spec.label!r} is not connected")

    def list_tools(self) -> list[Any]:
        """Every tool the server offers (all pages), as the SDK's `Tool` records."""
        self._check_alive()

        async def fetch() -> list[Any]:
            tools, cursor = [], None
            for _ in range(100):  # a server that pages forever cannot hang us
                page = await self._client.list_tools(cursor=cursor) if cursor else await self._client.list_tools()
                tools.extend(page.tools)
                cursor = _field(page, "next_cursor", "nextCursor")
                if not cursor:
                    break
            return tools

        return self._run(fetch(), self.spec.startup_timeout_s)

    def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float | None = None) -> MCPCallOutcome:
        """Call a tool. Raises TimeoutError past the limit, MCPConnectionError when the server is gone."""
        self._check_alive()
        limit = timeout_s or self.spec.call_timeout_s

        async def call() -> MCPCallOutcome:
            from mcp import MCPError
            from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

            start = time.perf_counter()
            try:
                result = await self._client.call_tool(name, arguments, read_timeout_seconds=limit)
            except MCPError as exc:
                if exc.code == REQUEST_TIMEOUT:
                    raise TimeoutError(f"no answer from the MCP server within {limit:g} s") from None
                if exc.code == CONNECTION_CLOSED:
                    self.dead = self.dead or f"connection closed: {exc.error.message}"
                    raise MCPConnectionError(f"MCP server {self.spec.label!r} is gone ({self.dead})"
                                             f"{self._stderr_tail()}") from None
                raise
            return outcome_of(result, time.perf_counter() - start)

        try:
            return self._run(call(), limit)
        except TimeoutError:
            raise
        except (OSError, EOFError) as exc:  # the HTTP transport's way of saying the server went away
            self.dead = self.dead or _describe(exc)
            raise MCPConnectionError(f"MCP server {self.spec.label!r} is gone ({self.dead})") from None

    def _stderr_tail(self, chars: int = 600) -> str:
        try:
            self._stderr.flush()
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - chars * 4))
            tail = " ".join(self._stderr.read().split())[-chars:]
        except (ValueError, OSError):
            return ""
        return f"; its stderr ends with: {tail}" if tail else ""


def _describe(exc: BaseException) -> str:
    """A one-line reason, digging into exception groups (anyio task groups raise those)."""
    inner = getattr(exc, "exceptions", None)
    if inner:
        return _describe(inner[0])
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

