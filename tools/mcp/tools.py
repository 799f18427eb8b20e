"""An MCP server's tools as agentgym `Tool`s, so any `ToolEnv` can offer them to the model.

    tools = agentgym.mcp_tools("python my_server.py")     # starts the server over stdio
    tools = agentgym.mcp_tools("http://127.0.0.1:8000/mcp", call_timeout_s=5)
    ...
    tools.close()                                         # or `with agentgym.mcp_tools(...) as tools:`

Each tool keeps the name, description and input JSON schema the server lists, exactly as given. A call
is checked against that schema (a wrong call is an observation saying what to fix, and never reaches
the server), sent with `tools/call`, and its result comes back as text; a result the server flags as an
error, a timeout, or a dead server all become `ok=False` observations through `run_tool`.
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable

from agentgym.errors import ConfigError
from agentgym.toolcalls import Tool
from agentgym.tools.mcp.server_spec import MCPServerSpec
from agentgym.tools.mcp.session import GRACE_S, MCPSession, _field

MAX_OUTPUT_CHARS = 20_000  # a tool that returns megabytes gives the model its head and a note


class MCPToolError(Exception):
    """The server answered the call with `isError`; the message is the server's own text."""


class MCPTool(Tool):
    """One tool of an MCP server; calling it sends `tools/call` through the session."""

    def __init__(self, session: MCPSession, name: str, description: str, input_schema: dict[str, Any],
                 call_timeout_s: float, max_output_chars: int = MAX_OUTPUT_CHARS):
        self.session = session
        self.fn = self._call
        self.name = name
        self.description = description or name
        self.parameters = input_schema  # as the server gave it: the model sees the server's own schema
        self.call_timeout_s = call_timeout_s
        self.timeout_s = call_timeout_s + 2 * GRACE_S  # run_tool's thread limit is only a backstop
        self.max_output_chars = max_output_chars
        self.signature = inspect.Signature([inspect.Parameter("arguments", inspect.Parameter.VAR_KEYWORD)])
        self._validator = _validator(input_schema)

    def _call(self, **arguments: Any) -> str:
        outcome = self.session.call_tool(self.name, arguments, self.call_timeout_s)
        text = outcome.text
        if len(text) > self.max_output_chars:
            text = text[: self.max_output_chars] + f"\n[... {len(outcome.text) - self.max_output_chars} more " \
                                                   "characters cut]"
        if outcome.is_error:
            raise MCPToolError(text or "the server reported an error without a message")
        return text

    def validate(self, arguments: Any) -> str | None:
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        if self._validator is None:
            return None
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path)
        return f"{'argument ' + repr(where) + ': ' if where else ''}{first.message[:300]}"

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} @ {self.session.spec.label!r})"


def _validator(schema: Any) -> Any:
    """A JSON-schema validator for the tool's input, or None when the schema itself is unusable."""
    import jsonschema  # a dependency of the mcp SDK itself

    if not isinstance(schema, dict):
        return None
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        return cls(schema)
    except jsonschema.SchemaError:
        return None  # a server with a broken schema: let the server judge its own arguments


class MCPToolset(list):
    """The tools of one server (a plain list of `Tool`s) that also owns the connection: close it when done."""

    def __init__(self, session: MCPSession, tools: Iterable[MCPTool]):
        super().__init__(tools)
        self.session = session

    @property
    def dead(self) -> str | None:
        """Why the server is unusable (it died, or the connection dropped), or None while it is fine."""
        return self.session.dead

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> MCPToolset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def mcp_tools(server: Any, *, call_timeout_s: float | None = None, startup_timeout_s: float | None = None,
              include: Iterable[str] | None = None, exclude: Iterable[str] = (),
              max_output_chars: int = MAX_OUTPUT_CHARS) -> MCPToolset:
    """Connect to an MCP server (see `MCPServerSpec.parse` for the forms) and return its tools.

    `include` keeps only the named tools (an unknown name is an error that lists what the server has);
    `exclude` drops some. The returned list owns the server connection: call `.close()`.
    """
    spec = MCPServerSpec.parse(server, call_timeout_s=call_timeout_s, startup_timeout_s=startup_timeout_s)
    session = MCPSession(spec)
    try:
        listed = session.list_tools()
        names = [t.name for t in listed]
        wanted = set(names) if include is None else set(include)
        missing = sorted(wanted - set(names))
        if missing:
            raise ConfigError(f"MCP server {spec.label!r} has no tool(s) {missing}; it offers: {', '.join(names)}")
        tools = [MCPTool(session, t.name, t.description or "", dict(_field(t, "input_schema", "inputSchema") or {}),
                         spec.call_timeout_s, max_output_chars)
                 for t in listed if t.name in wanted and t.name not in set(exclude)]
    except BaseException:
        session.close()
        raise
    return MCPToolset(session, tools)
