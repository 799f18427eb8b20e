"""The env service behind `agentgym serve env ID`: sessions of one registered env, as JSON requests and replies.

Transport-free (`handle(method, path, body) -> (status, payload)`), so the HTTP layer (server.py) stays thin
and the rules live here: one request at a time per session (a second gets 409), at most `max_sessions` open
sessions (503 past it, after reaping idle ones), at most `max_concurrent` env calls running at once (others
wait up to `queue_timeout_s`, then 503), sessions idle for `idle_timeout_s` closed by the reaper. An env that
raises answers 500 with the env's own message; a bad request answers 400 saying what to send.

Snapshots leave the server signed (HMAC-SHA256 with a per-server key, or AGENTGYM_SNAPSHOT_KEY shared by
replicas): restoring unpickles, so only bytes this server (or a replica) produced are ever restored.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from agentgym import snapshot as snapshots
from agentgym.envs.remote.wire import decode, encode
from agentgym.errors import AgentGymError, ConfigError

PROTOCOL = 1
SNAPSHOT_MAGIC = b"AGSNAP1"
_SESSION_PATH = re.compile(r"^/sessions/([0-9a-f]{32})(?:/(reset|step|snapshot|restore|render|oracle))?$")


class RequestError(Exception):
    """A request the service refuses: the HTTP status and a message that says what to send instead."""

    def __init__(self, status: int, kind: str, message: str, allow: str = ""):
        super().__init__(message)
        self.status, self.kind, self.message, self.allow = status, kind, message, allow


@dataclass(frozen=True)
class ServiceConfig:
    """Limits of one env server. Validated at construction."""

    max_sessions: int = 256          # open sessions at once
    max_concurrent: int = 32         # env calls (make, reset, step, ...) running at once
    queue_timeout_s: float = 30.0    # how long a call waits for a free slot before answering 503
    idle_timeout_s: float = 600.0    # a session untouched this long is closed by the reaper
    max_body_bytes: int = 16 << 20   # a 1 MB action of control characters is 6 MB of JSON escapes

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_concurrent", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("queue_timeout_s", "idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")


@dataclass
class _Session:
    env: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    started: bool = False   # reset (or restored) at least once: an episode exists to step


def _json_body(body: bytes) -> dict[str, Any]:
    if not body:  # no body: the defaults; a body of blanks is a body that is not JSON (schemathesis sent "\t")
        return {}
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, "bad_json", f"the body is not JSON ({exc}); send a JSON object") from exc
    if not isinstance(data, dict):
        raise RequestError(400, "bad_json", f"the body must be a JSON object, got {type(data).__name__}")
    return data


class EnvService:
    """Sessions of `env_id` (made with `env_kwargs`), served as JSON."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, config: ServiceConfig | None = None,
                 make_env: Callable[[], Any] | None = None, snapshot_key: bytes | None = None):
        from agentgym.registration import make, spec

        spec(env_id)  # an unknown id fails now, with "did you mean"
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.config = config or ServiceConfig()
        self._make = make_env or (lambda: make(env_id, **self.env_kwargs))
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.config.max_concurrent)
        key = os.environ.get("AGENTGYM_SNAPSHOT_KEY", "")
        self._key = snapshot_key or (key.encode() if key else secrets.token_bytes(32))
        self._started = time.monotonic()
        self.closed = False

    # ------------------------------------------------------------------ dispatch
    def handle(self, method: str, path: str, body: bytes = b"") -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON payload) for one request; never raises."""
        try:
            return 200, self._route(method, path.split("?", 1)[0], body)
        except RequestError as exc:   # `allow` becomes the Allow header of a 405
            extra = {"allow": exc.allow} if exc.allow else {}
            return exc.status, {"error": {"type": exc.kind, "message": exc.message, **extra}}
        except AgentGymError as exc:  # the env refused what was asked (a bad task_id, options, snapshot ...)
            return 400, {"error": {"type": "bad_request", "exception": type(exc).__name__, "message": str(exc)}}
        except Exception as exc:  # an env bug: the env's own message goes back to the client
            return 500, {"error": {"type": "env_error", "exception": type(exc).__name__, "message": str(exc)}}

    def _route(self, method: str, path: str, body: bytes) -> dict[str, Any]:
        from agentgym.envs.remote.openapi import openapi_schema

        fixed: dict[tuple[str, str], Callable[[], dict[str, Any]]] = {
            ("GET", "/health"): self.health, ("GET", "/spec"): self.spec,
            ("GET", "/openapi.json"): lambda: openapi_schema(self.env_id),
            ("POST", "/sessions"): lambda: self.create(_json_body(body)),
        }
        if (method, path) in fixed:
            return fixed[(method, path)]()
        match = _SESSION_PATH.match(path)
        if match is None:
            allowed_here = [m for m, p in fixed if p == path]
            if allowed_here:
                raise RequestError(405, "method_not_allowed", f"{method} is not allowed on {path}; use "
                                   f"{allowed_here[0]}", allow=", ".join(allowed_here))
            raise RequestError(404, "not_found", f"no route {method} {path}; GET /openapi.json lists them")
        sid, action = match.groups()
        allowed = {None: "DELETE", "render": "GET", "oracle": "GET"}.get(action, "POST")
        if method != allowed:
            raise RequestError(405, "method_not_allowed", f"{method} is not allowed on {path}; use {allowed}",
                               allow=allowed)
        if action is None:
            return self.close_session(sid)
        return self._in_session(sid, action, _json_body(body))

    # ------------------------------------------------------------------ service-wide
    def health(self) -> dict[str, Any]:
        with self._lock:
            busy = sum(s.lock.locked() for s in self._sessions.values())
            return {"status": "closing" if self.closed else "ok", "env_id": self.env_id,
                    "sessions": len(self._sessions), "busy_sessions": busy,
                    "max_sessions": self.config.max_sessions, "uptime_s": round(time.monotonic() - self._started, 3),
                    "protocol": PROTOCOL}

    def spec(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "kwargs": encode(self.env_kwargs), "protocol": PROTOCOL,
                "limits": {"max_sessions": self.config.max_sessions, "max_concurrent": self.config.max_concurrent,
                           "idle_timeout_s": self.config.idle_timeout_s,
                           "max_body_bytes": self.config.max_body_bytes}}

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        if body:
            raise RequestError(400, "bad_request", f"POST /sessions takes an empty object; this server serves "
                               f"{self.env_id} with fixed kwargs (got keys {sorted(body)[:5]})")
        with self._lock:
            full = len(self._sessions) >= self.config.max_sessions
        if full:
            self.reap()
            with self._lock:
                if len(self._sessions) >= self.config.max_sessions:
                    raise RequestError(503, "too_many_sessions", f"{self.config.max_sessions} sessions are open; "
                                       "close finished ones (DELETE /sessions/ID) or raise --max-sessions")
        with self._slot():
            env = self._make()
        sid = secrets.token_hex(16)
        with self._lock:
            self._sessions[sid] = _Session(env)
        return {"session_id": sid, "env_id": self.env_id, **self._describe(env)}

    def _describe(self, env: Any) -> dict[str, Any]:
        from agentgym.engine.vector import env_turn_limit

        base = env.unwrapped
        return {"instructions": str(getattr(base, "instructions", "") or ""),
                "tools": [t.schema for t in (getattr(base, "tools", None) or ())],
                "max_turns": env_turn_limit(env), "snapshot": snapshots.supports_snapshot(env)}

    def close_session(self, sid: str) -> dict[str, Any]:
        with self._lock:
            session = self._sessions.pop(sid, None)
        if session is None:
            raise RequestError(404, "no_session", f"no session {sid} (closed, or reaped after "
                               f"{self.config.idle_timeout_s:g} s idle)")
        session.env.close()
        return {"closed": True}

    def reap(self) -> int:
        """Close sessions idle longer than `idle_timeout_s` (never one in the middle of a call)."""
        cutoff = time.monotonic() - self.config.idle_timeout_s
        with self._lock:
            idle = [sid for sid, s in self._sessions.items() if s.last_used < cutoff and not s.lock.locked()]
            victims = [self._sessions.pop(sid) for sid in idle]
        for session in victims:
            try:
                session.env.close()
            except Exception:  # a broken close must not stop the reaper
                pass
        return len(victims)

    def close(self) -> None:
        self.closed = True
        with self._lock:
            victims, self._sessions = list(self._sessions.values()), {}
        for session in victims:
            try:
                session.env.close()
            except Exception:
                pass

    # ------------------------------------------------------------------ per session
    def _slot(self) -> Any:
        service = self

        class _Slot:
            def __enter__(self) -> None:
                if not service._slots.acquire(timeout=service.config.queue_timeout_s):
                    raise RequestError(503, "busy", f"all {service.config.max_concurrent} env slots stayed busy "
                                       f"for {service.config.queue_timeout_s:g} s; retry later")

            def __exit__(self, *exc: Any) -> None:
                service._slots.release()
        return _Slot()

    def _in_session(self, sid: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            session = self._sessions.get(sid)
        if session is None:
            raise RequestError(404, "no_session", f"no session {sid} (closed, or reaped after "
                               f"{self.config.idle_timeout_s:g} s idle); POST /sessions for a new one")
        if not session.lock.acquire(blocking=False):
            raise RequestError(409, "session_busy", f"session {sid} is still answering an earlier request; "
                               "send one request at a time per session")
        try:
            if not session.started and action not in ("reset", "restore"):
                raise RequestError(409, "not_reset", f"session {sid} has no episode yet; POST "
                                   f"/sessions/{sid}/reset first")
            with self._slot():
                reply = getattr(self, f"_do_{action}")(session.env, body)
            session.started = session.started or action in ("reset", "restore")
            return reply
        finally:
            session.last_used = time.monotonic()
            session.lock.release()

    def _do_reset(self, env: Any, body: dict[str, Any]) -> dict[str, Any]:
        seed, options = body.get("seed"), body.get("options")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63):
            raise RequestError(400, "bad_request", f"seed must be null or an integer in [0, 2**63), got {seed!r}")
        if options is not None and not isinstance(options, dict):
            raise RequestError(400, "bad_request", f"options must be null or an object, got {type(options).__name__}")
        obs, info = env.reset(seed=seed, options=decode(options) if options else None)
        return {"observation": obs, "info": encode(info), **self._describe(env)}

    def _do_step(self, env: Any, body: dict[str, Any]) -> dict[str, Any]:
        action = body.get("action")
        if not isinstance(action, str):
            raise RequestError(400, "bad_request", f"send {{\"action\": \"<text>\"}}; action must be a string, got "
                               f"{type(action).__name__}")
        obs, reward, terminated, truncated, info = env.step(action)
        return {"observation": obs, "reward": float(reward), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": encode(info)}

    def _do_render(self, env: Any, body: dict[str, Any]) -> dict[str, Any]:
        text = env.render()
        return {"text": text if text is None else str(text)}

    def _do_oracle(self, env: Any, body: dict[str, Any]) -> dict[str, Any]:
        fn = getattr(env.unwrapped, "oracle_action", None)
        action = fn() if fn is not None else None
        return {"action": action if action is None else str(action)}

    def _do_snapshot(self, env: Any, body: dict[str, Any]) -> dict[str, Any]:
        if not snapshots.supports_snapshot(env):
            raise RequestError(501, "no_snapshots", f"{self.env_id} does not support snapshots")
        data = snapshots.snapshot(env)
        signed = SNAPSHOT_MAGIC + hmac.new(self._key, data, hashlib.sha256).digest() + data
        return {"snapshot": base64.b64encode(signed).decode("ascii"), "bytes": len(data)}

    def _do_restore(self, env: Any, body: dict[str, Any]) -> dict[str, Any]:
        if not snapshots.supports_snapshot(env):
            raise RequestError(501, "no_snapshots", f"{self.env_id} does not support snapshots")
        try:   # 403 for anything this server did not sign: it is never unpickled
            signed = base64.b64decode(str(body.get("snapshot", "")), validate=True)
        except ValueError as exc:
            raise RequestError(403, "bad_snapshot", f"snapshot must be the base64 this server sent ({exc})") from exc
        head, mac, data = signed[:len(SNAPSHOT_MAGIC)], signed[len(SNAPSHOT_MAGIC):len(SNAPSHOT_MAGIC) + 32], \
            signed[len(SNAPSHOT_MAGIC) + 32:]
        good = hmac.new(self._key, data, hashlib.sha256).digest()
        if head != SNAPSHOT_MAGIC or not hmac.compare_digest(mac, good):
            raise RequestError(403, "bad_snapshot", "this snapshot was not made by this server (bad signature); "
                               "replicas that share snapshots need the same AGENTGYM_SNAPSHOT_KEY")
        snapshots.restore(env, data)
        return {"restored": True}
