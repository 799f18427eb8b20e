"""The HTTP side of an env server: the standard library's ThreadingHTTPServer around `EnvService`.

Why the standard library and not Starlette/uvicorn (the shop's stack): an env server must run wherever the
env runs, in a minimal container or on a bare test host, with nothing but agentgym's core dependencies; and
env calls are blocking code, which a thread per connection serves directly (an ASGI app would hand every call
to a thread pool anyway). HTTP/1.1 keep-alive keeps a client's connection open across steps.
"""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentgym.envs.remote.service import EnvService
from agentgym.errors import ConfigError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agentgym-env-server/1"
    disable_nagle_algorithm = True   # headers and body are two writes: no 40 ms delayed-ACK stall between them
    timeout = 300   # an idle keep-alive connection frees its thread after this long

    @property
    def service(self) -> EnvService:
        return self.server.service  # type: ignore[attr-defined]

    def _serve(self) -> None:
        length_header = self.headers.get("Content-Length") or "0"
        try:
            length = int(length_header)
        except ValueError:
            length = -1
        if length < 0:
            self._reply(400, {"error": {"type": "bad_request", "message": f"bad Content-Length {length_header!r}"}},
                        close=True)
            return
        if length > self.service.config.max_body_bytes:
            self._reply(413, {"error": {"type": "too_large", "message": f"the body has {length} bytes; this server "
                                        f"takes at most {self.service.config.max_body_bytes} (--max-body-mb)"}},
                        close=True)   # the unread body would be taken for the next request
            return
        body = self.rfile.read(length) if length else b""
        status, payload = self.service.handle(self.command, self.path, body)
        self._reply(status, payload)

    def _reply(self, status: int, payload: dict[str, Any], close: bool = False) -> None:
        try:
            data = json.dumps(payload, allow_nan=False).encode("ascii")
        except ValueError as exc:   # NaN or infinity from the env: not JSON, and a broken contract
            status, data = 500, json.dumps({"error": {"type": "env_error", "message": f"the env returned {exc}"}}
                                           ).encode("ascii")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 405:
            self.send_header("Allow", str(payload.get("error", {}).get("allow", "")))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        try:
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):   # the client gave up (its step timed out)
            self.close_connection = True

    def __getattr__(self, name: str) -> Any:
        # every method (do_GET, do_TRACE, do_QUERY ...) reaches the service, which answers 405 with an
        # Allow header for those a path does not take, instead of http.server's HTML 501
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:  # requests are not logged: a trainer sends thousands
        pass


class EnvServer:
    """An `EnvService` on host:port with a reaper thread. `start()` serves from a background thread (tests,
    in-process use); `serve_forever()` blocks (the CLI)."""

    def __init__(self, service: EnvService, host: str = "127.0.0.1", port: int = 0):
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be between 0 and 65535, got {port}")
        self.service = service
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_cls = type("_Server", (ThreadingHTTPServer,), {"address_family": family, "daemon_threads": True,
                                                               "request_queue_size": 1024})
        try:
            self.httpd = server_cls((host, port), _Handler)
        except OSError as exc:
            raise ConfigError(f"cannot bind {host}:{port} ({exc.strerror}); pick another --port") from exc
        self.httpd.service = service  # type: ignore[attr-defined]
        self.host, self.port = host, self.httpd.server_address[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://[{self.host}]:{self.port}" if ":" in self.host else f"http://{self.host}:{self.port}"

    def _reap_loop(self) -> None:
        interval = min(5.0, max(0.05, self.service.config.idle_timeout_s / 4))
        while not self._stop.wait(interval):
            self.service.reap()

    def start(self) -> "EnvServer":
        for target, name in ((self.httpd.serve_forever, "serve"), (self._reap_loop, "reap")):
            thread = threading.Thread(target=target, name=f"agentgym-env-server-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def serve_forever(self) -> None:
        reaper = threading.Thread(target=self._reap_loop, name="agentgym-env-server-reap", daemon=True)
        reaper.start()
        try:
            self.httpd.serve_forever()
        finally:
            self.close()

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._threads:   # started in the background: stop that loop (shutdown() waits for it)
            self.httpd.shutdown()
        self.httpd.server_close()
        self.service.close()

    def __enter__(self) -> "EnvServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()
