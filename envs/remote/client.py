"""`RemoteEnv` (agentgym/Remote-v0, or `remote:URL/ID` wherever an env id is taken): a `TextEnv` that plays
an env served by `agentgym serve env ID` over HTTP, through the same contract as the env itself.

    env = agentgym.make("remote:http://10.0.0.2:8020/agentgym/Household-v0")

Every call is one HTTP request with its own time limit (`step_timeout_s`): a slow or hung server fails that
call with `RemoteEnvError`, which the rollout records as that episode's failure while the other episodes go
on; a session lost that way (or to a restarted server) is replaced by a fresh one at the next reset.
With `url=""` the env serves `env_id` itself, from a loopback server on a background thread that it closes
(`env_kwargs` apply then): the same HTTP path, self-contained, used by the contract tests.
"""
from __future__ import annotations

import base64
import json
import secrets
import socket
from typing import Any

from agentgym.core import TextEnv
from agentgym.envs.remote.wire import decode, encode, remote_tool
from agentgym.errors import ConfigError, RemoteEnvError
from agentgym.toolcalls import Tool

_JSON = {"Content-Type": "application/json"}
# self-served envs of one process sign snapshots alike, so one's snapshot restores into another
_PROCESS_KEY = secrets.token_bytes(32)


class RemoteEnv(TextEnv):
    def __init__(self, url: str = "", env_id: str = "agentgym/Toy-KeyDoor-v0", step_timeout_s: float = 60.0,
                 connect_timeout_s: float = 10.0, env_kwargs: dict[str, Any] | None = None):
        import httpx

        if not step_timeout_s > 0 or not connect_timeout_s > 0:
            raise ConfigError(f"step_timeout_s and connect_timeout_s must be > 0, got {step_timeout_s} and "
                              f"{connect_timeout_s}")
        self._local = None
        if not url:
            from agentgym.envs.remote.server import EnvServer
            from agentgym.envs.remote.service import EnvService

            self._local = EnvServer(EnvService(env_id, env_kwargs, snapshot_key=_PROCESS_KEY)).start()
            url = self._local.url
        elif env_kwargs:
            raise ConfigError(f"env_kwargs only apply to a self-served env (url=''); the server at {url} makes "
                              f"{env_id} with its own --kwargs")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"url must start with http:// or https://, got {url!r}")
        self.url, self.env_id = url.rstrip("/"), env_id
        # TCP_NODELAY: h11 writes a request's headers and body separately, and Nagle would hold the body
        # back for the server's delayed ACK (measured: restore p50 4.8 ms -> 1.3 ms on loopback);
        # trust_env=False: an env server is reached directly, never through an HTTP(S)_PROXY from the environment
        transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        self._http = httpx.Client(base_url=self.url, timeout=httpx.Timeout(step_timeout_s, connect=connect_timeout_s),
                                  trust_env=False, transport=transport)
        self._session: str | None = None
        self._describe: dict[str, Any] = {}
        self._tools: list[Tool] = []
        self.max_turns: int | None = None
        self._closed = False
        try:
            self._check_server()
            self._open()
        except Exception:
            self.close()
            raise

    # ------------------------------------------------------------------ transport
    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        import httpx

        try:
            # json.dumps escapes to ASCII, so lone surrogates travel too (httpx's json= would refuse them)
            content = json.dumps(body).encode("ascii") if body is not None else None
            response = self._http.request(method, path, content=content, headers=_JSON if content else None)
        except httpx.TimeoutException as exc:
            self._session = None   # the server may still be busy with it: the next reset opens a new session
            raise RemoteEnvError(f"{method} {self.url}{path} timed out ({type(exc).__name__}); the env server is "
                                 "slow or hung (raise step_timeout_s if it is just slow)") from exc
        except httpx.HTTPError as exc:
            self._session = None
            raise RemoteEnvError(f"{method} {self.url}{path} failed: {type(exc).__name__}: {exc}; is the env "
                                 f"server running? (agentgym serve env {self.env_id} --port PORT)") from exc
        try:
            payload = response.json()
        except ValueError:
            payload = {"error": {"type": "not_json", "message": response.text[:300]}}
        if response.status_code != 200:
            error = payload.get("error", {}) if isinstance(payload, dict) else {}
            raise RemoteEnvError(f"env server {self.url} answered {response.status_code} to {method} {path}: "
                                 f"{error.get('type', '?')}: {error.get('message', payload)}", )
        return payload

    def _check_server(self) -> None:
        served = self._call("GET", "/spec").get("env_id")
        if served != self.env_id:
            raise ConfigError(f"the env server at {self.url} serves {served!r}, not {self.env_id!r}; use "
                              f"remote:{self.url}/{served}")

    def _open(self) -> None:
        reply = self._call("POST", "/sessions", {})
        self._session = str(reply["session_id"])
        self._update(reply)

    def _update(self, reply: dict[str, Any]) -> None:
        self._describe = reply
        self._tools = [remote_tool(schema) for schema in reply.get("tools", [])]
        limit = reply.get("max_turns")
        self.max_turns = limit if isinstance(limit, int) else None

    def _path(self, what: str) -> str:
        if self._session is None:
            raise RemoteEnvError(f"the session with {self.url} was lost (a timeout or a failed call); reset() "
                                 "opens a new one")
        return f"/sessions/{self._session}/{what}"

    # ------------------------------------------------------------------ the contract
    @property
    def instructions(self) -> str:
        return str(self._describe.get("instructions", ""))

    @property
    def tools(self) -> list[Tool]:
        return list(self._tools)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self._session is None:
            self._open()
        body = {"seed": seed, "options": encode(options) if options else None}
        try:
            reply = self._call("POST", self._path("reset"), body)
        except RemoteEnvError as exc:
            if "no_session" not in str(exc):
                raise
            self._open()   # reaped while idle, or the server restarted: a fresh session, same reset
            reply = self._call("POST", self._path("reset"), body)
        self._update(reply)
        self._last_obs = str(reply["observation"])
        return self._last_obs, decode(reply["info"])

    def step(self, action: str):
        action = action if isinstance(action, str) else str(action)
        reply = self._call("POST", self._path("step"), {"action": action})
        self._last_obs = str(reply["observation"])
        return (self._last_obs, float(reply["reward"]), bool(reply["terminated"]), bool(reply["truncated"]),
                decode(reply["info"]))

    def oracle_action(self) -> str | None:
        return self._call("GET", self._path("oracle")).get("action")

    def render(self) -> str | None:
        return self._call("GET", self._path("render")).get("text")

    def supports_snapshot(self) -> bool:
        return bool(self._describe.get("snapshot"))

    def snapshot(self) -> bytes:
        """The server's signed snapshot: opaque bytes that this server (or a replica sharing
        AGENTGYM_SNAPSHOT_KEY) restores."""
        return base64.b64decode(self._call("POST", self._path("snapshot"))["snapshot"])

    def restore(self, data: bytes) -> None:
        if self._session is None:
            self._open()
        self._call("POST", self._path("restore"), {"snapshot": base64.b64encode(data).decode("ascii")})

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._session is not None:
            try:
                self._http.request("DELETE", f"/sessions/{self._session}", timeout=2.0)
            except Exception:  # a dead server has nothing left to close; its reaper frees the rest
                pass
            self._session = None
        self._http.close()
        if self._local is not None:
            self._local.close()
