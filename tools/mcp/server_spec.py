"""Which MCP server to talk to: a stdio command, a streamable-HTTP URL, or a command that serves a URL.

    "python my_server.py --flag"                  stdio: the command, split like a shell would
    ["python", "my_server.py"]                    stdio: the argv
    "http://127.0.0.1:8000/mcp"                   streamable HTTP to a server someone else runs
    {"command": [...], "url": "http://..."}       streamable HTTP to a server this process starts and owns
    {"command": "...", "env": {...}, "cwd": "..."} stdio with an environment and a working directory
    ["{python}", "server.py"]                     `{python}` is replaced by the running interpreter

Pure parsing, no `mcp` import: a bad spec is a one-line `ConfigError` before anything starts.
"""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ConfigError

_KEYS = ("command", "url", "env", "cwd", "call_timeout_s", "startup_timeout_s", "name")


@dataclass(frozen=True)
class MCPServerSpec:
    """How to reach one MCP server, and the time limits for talking to it."""

    command: tuple[str, ...] = ()          # stdio server argv, or the launcher of an HTTP server when `url` is set
    url: str = ""                          # streamable-HTTP endpoint (e.g. http://127.0.0.1:8000/mcp)
    env: dict[str, str] = field(default_factory=dict)  # extra environment variables for the launched process
    cwd: str | None = None                 # working directory of the launched process
    call_timeout_s: float = 30.0           # per tool call; a call that takes longer is an error observation
    startup_timeout_s: float = 60.0        # connecting (and starting the process) may take this long
    name: str = ""                         # a label for messages; defaults to the command or URL

    def __post_init__(self) -> None:
        if not self.command and not self.url:
            raise ConfigError("an MCP server needs a stdio `command` or a streamable-HTTP `url` "
                              "(e.g. 'python server.py' or 'http://127.0.0.1:8000/mcp')")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"MCP server url {self.url!r} must start with http:// or https://")
        for label, value in (("call_timeout_s", self.call_timeout_s), ("startup_timeout_s", self.startup_timeout_s)):
            if not value > 0:
                raise ConfigError(f"MCP server {label} must be > 0 seconds, got {value!r}")

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    @property
    def owns_process(self) -> bool:
        """True when closing the connection must also stop a process we started."""
        return bool(self.command)

    @property
    def label(self) -> str:
        if self.name or self.url:
            return self.name or self.url
        return " ".join([os.path.basename(self.command[0]), *self.command[1:]])[:120]

    @classmethod
    def parse(cls, server: Any, **overrides: Any) -> MCPServerSpec:
        """A spec from a string, an argv list, a mapping or a spec; `overrides` win (e.g. call_timeout_s)."""
        if isinstance(server, MCPServerSpec):
            fields = {k: getattr(server, k) for k in _KEYS}
        elif isinstance(server, str):
            text = server.strip()
            if not text:
                raise ConfigError("MCP server is an empty string; give a command or an http(s):// URL")
            fields = {"url": text} if text.startswith(("http://", "https://")) else {"command": shlex.split(text)}
        elif isinstance(server, (list, tuple)):
            fields = {"command": list(server)}
        elif isinstance(server, dict):
            unknown = sorted(set(server) - set(_KEYS))
            if unknown:
                raise ConfigError(f"unknown MCP server key(s) {unknown}; allowed: {', '.join(_KEYS)}")
            fields = dict(server)
        else:
            raise ConfigError(f"an MCP server is a command string, an argv list, a URL or a mapping, "
                              f"got {type(server).__name__}")
        fields.update({k: v for k, v in overrides.items() if v is not None})
        command = fields.get("command") or ()
        if isinstance(command, str):
            command = shlex.split(command)
        if not all(isinstance(part, (str, int, float)) for part in command):
            raise ConfigError("MCP server `command` must be a string or a list of strings")
        # `{python}` is this interpreter, so a config file can start a Python server portably
        fields["command"] = tuple(sys.executable if str(part) == "{python}" else str(part) for part in command)
        fields["env"] = {str(k): str(v) for k, v in (fields.get("env") or {}).items()}
        for key in ("call_timeout_s", "startup_timeout_s"):
            if key in fields:
                try:
                    fields[key] = float(fields[key])
                except (TypeError, ValueError):
                    raise ConfigError(f"MCP server {key} must be a number of seconds, got {fields[key]!r}") from None
        return cls(**fields)
