"""Tools: typed Python functions whose JSON schema is derived, and the parsers for tool calls.

    @tool
    def search(query: str, k: int = 3) -> str:
        '''Search the corpus.

        Args:
            query: What to look for.
            k: How many passages to return.
        '''

A model calls a tool in its family's own format: Hermes `<tool_call>{"name": "search", "arguments": {...}}
</tool_call>` by default, bare OpenAI JSON, Llama 3, Mistral, Qwen3-Coder XML, DeepSeek, gpt-oss harmony and more
(the registry is `agentgym.toolcall_formats`); `parse_tool_calls(text, formats)` tries the named ones in turn.
Tags: `<action>go to desk 1</action>`, `<answer>Paris</answer>` (`extract_tag`).
"""
from __future__ import annotations

import inspect
import json
import re
import threading
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence, Union, get_args, get_origin

from agentgym.errors import ToolError
from agentgym.toolcall_formats import FORMATS, MAX_PARSE_CHARS, Schemas, ToolCall, parse_calls
from agentgym.toolcall_formats.json_formats import HERMES, OPENAI

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               list: "array", dict: "object"}


@dataclass(frozen=True)
class ToolResult:
    """What running one call gave back: `ok` is False when the call was wrong or the tool raised."""

    name: str
    output: str
    ok: bool
    arguments: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _json_schema(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = get_origin(annotation)
    if origin is Literal:
        values = list(get_args(annotation))
        return {"enum": values, "type": _JSON_TYPES.get(type(values[0]), "string")}
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        return _json_schema(options[0]) if len(options) == 1 else {"anyOf": [_json_schema(a) for a in options]}
    if origin in (list, tuple, set, typing.Sequence):
        args = get_args(annotation)
        return {"type": "array", "items": _json_schema(args[0])} if args else {"type": "array"}
    if origin is dict:
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    raise ToolError(f"tool parameter type {annotation!r} has no JSON schema; use str, int, float, bool, list or dict")


def _parse_google_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary text and per-argument descriptions from a Google-style docstring."""
    doc = inspect.cleandoc(doc or "")
    summary_lines, args, section, current = [], {}, None, None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section = "args"
            continue
        if stripped.endswith(":") and stripped[:-1] in ("Returns", "Raises", "Yields", "Examples", "Example", "Note"):
            section = "other"
            continue
        if section is None:
            summary_lines.append(stripped)
        elif section == "args" and stripped:
            match = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
            if match and line.startswith(" " * 4) and not line.startswith(" " * 8):
                current = match.group(1)
                args[current] = match.group(3)
            elif match and current is None:
                current = match.group(1)
                args[current] = match.group(3)
            elif current:
                args[current] = (args[current] + " " + stripped).strip()
    return " ".join(s for s in summary_lines if s).strip(), args


class Tool:
    """A callable the model can invoke, with a JSON schema derived from its signature and docstring."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, description: str | None = None,
                 timeout_s: float | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        self.timeout_s = timeout_s
        summary, arg_docs = _parse_google_docstring(fn.__doc__ or "")
        self.description = description or summary or self.name
        self.signature = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # unresolved forward references: fall back to raw annotations
            hints = {}
        properties, required = {}, []
        for pname, param in self.signature.parameters.items():
            if pname in ("self", "cls") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            schema = _json_schema(hints.get(pname, param.annotation))
            if pname in arg_docs:
                schema["description"] = arg_docs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            else:
                schema["default"] = param.default
            properties[pname] = schema
        self.parameters = {"type": "object", "properties": properties, "required": required}

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema, as chat templates expect it."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def usage(self, call_format: str = "hermes") -> str:
        """An example of a correct call in `call_format` (a `FORMATS` name), used in error observations."""
        fmt = FORMATS.get(call_format, HERMES)
        return fmt.example(self.name, self.parameters)

    def validate(self, arguments: Any) -> str | None:
        """Why these arguments cannot be passed, or None if they can."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        props, required = self.parameters["properties"], self.parameters["required"]
        missing = [p for p in required if p not in arguments]
        if missing:
            return f"missing required argument(s): {', '.join(missing)}"
        unknown = [a for a in arguments if a not in props]
        if unknown and not any(p.kind == p.VAR_KEYWORD for p in self.signature.parameters.values()):
            return f"unknown argument(s): {', '.join(map(str, unknown))}; expected {', '.join(props) or 'none'}"
        for name, value in arguments.items():
            expected = props.get(name, {}).get("type")
            if value is None and "default" in props.get(name, {}) and props[name]["default"] is None:
                continue  # an Optional parameter given JSON null: what its default means anyway
            if expected and not _matches(value, expected):
                return f"argument {name!r} must be of type {expected}, got {type(value).__name__}"
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __get__(self, obj: Any, objtype: Any = None) -> Tool:
        """Used as a method decorator, binding yields a Tool over the bound method."""
        if obj is None:
            return self
        bound = Tool.__new__(Tool)
        bound.__dict__.update(self.__dict__)
        bound.fn = self.fn.__get__(obj, objtype)
        return bound

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


_PY_TYPES: dict[str, Any] = {"string": str, "boolean": bool, "array": list, "object": dict}


def _matches(value: Any, json_type: str) -> bool:
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _PY_TYPES.get(json_type, object))


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         timeout_s: float | None = None) -> Any:
    """Decorator: `@tool` or `@tool(name=..., timeout_s=...)` makes a `Tool` of a typed function."""
    if fn is None:
        return lambda f: Tool(f, name=name, description=description, timeout_s=timeout_s)
    return Tool(fn, name=name, description=description, timeout_s=timeout_s)


# ----------------------------------------------------------------------------------------------- parsers
# The formats themselves live in agentgym/toolcall_formats (one registry); these names are kept for callers.
parse_hermes = HERMES.parse
parse_openai_json = OPENAI.parse


def extract_tag(text: str, tag: str) -> str | None:
    """The content of the last `<tag>...</tag>` in the text, stripped; None if there is none.

    A scan with `str.find`, not a lazy regex: `<tag>` repeated without a closing tag made the regex
    quadratic (seconds on 100 kB of model garbage).
    """
    text, opening, closing = text[:MAX_PARSE_CHARS], f"<{tag}>", f"</{tag}>"
    found, pos = None, 0
    while (start := text.find(opening, pos)) != -1:
        end = text.find(closing, start + len(opening))
        if end == -1:  # no closing tag after this one, so none after any later one either
            break
        found, pos = text[start + len(opening):end], end + len(closing)
    return found.strip() if found is not None else None


def parse_tool_calls(text: str, formats: Sequence[str] = ("hermes", "openai"), schemas: Schemas | None = None
                     ) -> list[ToolCall]:
    """Tool calls in the action, trying each format (a name in `FORMATS`) in turn; [] when it has none.
    `schemas` (tool name -> JSON-schema parameters) types the values of the XML formats."""
    return parse_calls(text, formats, schemas)


#: name -> `parse(text)` of the built-in formats (the registry itself is `agentgym.toolcall_formats.FORMATS`)
PARSERS: dict[str, Callable[..., list[ToolCall]]] = {name: fmt.parse for name, fmt in FORMATS.items()}


def run_tool(tools: dict[str, Tool], call: ToolCall, timeout_s: float = 10.0, call_format: str = "hermes"
             ) -> ToolResult:
    """Run one call; every way it can go wrong becomes a result with ok=False and a helpful message whose
    example call is written in `call_format`."""
    import time

    if call.error:
        example = next(iter(tools.values())).usage(call_format) if tools else FORMATS.get(
            call_format, HERMES).example("tool_name")
        return ToolResult(call.name or "?", f"Error: {call.error}. Call a tool like: {example}", False, call.arguments)
    tool_ = tools.get(call.name)
    if tool_ is None:
        import difflib

        close = difflib.get_close_matches(call.name, list(tools), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return ToolResult(call.name, f"Error: unknown tool {call.name[:80]!r}.{hint} Available tools: "
                          f"{', '.join(tools) or 'none'}.", False, call.arguments)
    problem = tool_.validate(call.arguments)
    if problem:
        return ToolResult(call.name, f"Error: {problem}. Call it like: {tool_.usage(call_format)}", False,
                          call.arguments)
    limit = tool_.timeout_s or timeout_s
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = tool_(**call.arguments)
        except Exception as exc:  # the tool's failure is the model's observation, not a crash
            box["error"] = f"{type(exc).__name__}: {exc}"

    start = time.perf_counter()
    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(limit)
    seconds = time.perf_counter() - start
    if worker.is_alive():
        return ToolResult(call.name, f"Error: {call.name} timed out after {limit:g} s.", False, call.arguments, seconds)
    if "error" in box:
        return ToolResult(call.name, f"Error: {call.name} failed: {box['error']}", False, call.arguments, seconds)
    value = box.get("value")
    output = value if isinstance(value, str) else json.dumps(value, default=str)
    return ToolResult(call.name, output, True, call.arguments, seconds)
