"""What every tool-call format shares: the `ToolCall` record, the `ToolCallFormat` entry of the registry, and
the JSON helpers whose every failure becomes a message for the model (never an exception).

A format is four small functions: `parse` (text -> calls; a call that cannot be used is a `ToolCall` with
`error` set), `looks_like` (does the text attempt a call in this format at all: the tool-call guard counts
turns that attempt one but parse to none), `render_call` (one call as the model writes it: the examples in
the prompt and in error messages) and `tools_prompt` (the system-prompt text listing the tools, used when
the chat template cannot render `tools=` itself).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

MAX_PARSE_CHARS = 200_000  # longer actions are parsed on their head only: no regex over megabytes

#: tool name -> its JSON-schema `parameters` (XML formats type their string values by it)
Schemas = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for. `error` is set when the call could not be parsed."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class ToolCallFormat:
    """One model family's way of writing tool calls (see the module docstring)."""

    name: str
    doc: str
    parse: Callable[[str, Schemas | None], list[ToolCall]]
    looks_like: Callable[[str], bool]
    render_call: Callable[[ToolCall], str]
    tools_prompt: Callable[[Sequence[dict[str, Any]]], str] | None = None
    template_markers: tuple[str, ...] = ()  # all present in a chat template (or its special tokens): this format
    render_many: Callable[[Sequence[ToolCall]], str] | None = None  # several calls in one turn, where not joined

    def render_calls(self, calls: Sequence[ToolCall]) -> str:
        """Several calls in one turn as this format writes them (one per line unless it says otherwise)."""
        if self.render_many is not None and len(calls) > 1:
            return self.render_many(calls)
        return "\n".join(self.render_call(c) for c in calls)

    def prompt(self, schemas: Sequence[dict[str, Any]]) -> str:
        """The system-prompt text that lists the tools and shows how to call them in this format."""
        if self.tools_prompt is not None:
            return self.tools_prompt(schemas)
        return generic_tools_prompt(self, schemas)

    def example(self, name: str, parameters: Mapping[str, Any] | None = None) -> str:
        """A correct call of tool `name` with placeholders for its required arguments."""
        params: Mapping[str, Any] = parameters if isinstance(parameters, Mapping) else {}
        found = params.get("properties")
        props: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        args = {p: f"<{_type_of(props.get(p))}>" for p in params.get("required") or () if isinstance(p, str)}
        return self.render_call(ToolCall(name, args))


def _type_of(schema: Any) -> str:
    return str(schema.get("type", "value")) if isinstance(schema, Mapping) else "value"


def generic_tools_prompt(fmt: ToolCallFormat, schemas: Sequence[dict[str, Any]]) -> str:
    listing = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    first: Mapping[str, Any] = schemas[0].get("function", schemas[0]) if schemas else {"name": "tool_name"}
    parameters = first.get("parameters")
    example = fmt.example(str(first.get("name", "tool_name")), parameters if isinstance(parameters, Mapping) else None)
    return ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n"
            f"</tools>\n\nTo call a function, write it exactly like this:\n{example}")


class BadJSON(ValueError):
    """Text that is not JSON we can use; the message says why, for the model's observation."""


def loads(text: str) -> Any:
    """`json.loads` whose every failure is a `BadJSON`: deep nesting raises RecursionError and a
    5,000-digit number ValueError in plain `json.loads`, and model garbage must never crash a step."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadJSON(f"{exc.msg} at char {exc.pos}") from None
    except (ValueError, RecursionError) as exc:
        raise BadJSON(str(exc).split("\n")[0] or type(exc).__name__) from None


def raw_decode(text: str, start: int) -> tuple[Any, int]:
    """One JSON value at `text[start:]` and where it ends; `BadJSON` on any failure."""
    try:
        return json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise BadJSON(f"{exc.msg} at char {exc.pos - start}") from None
    except (ValueError, RecursionError) as exc:
        raise BadJSON(str(exc).split("\n")[0] or type(exc).__name__) from None


def arguments_of(name: str, args: Any) -> ToolCall:
    """A call of `name` with `args` (a dict, a JSON string of one, or null), or one whose error says why not."""
    if isinstance(args, str):  # OpenAI and others send arguments as a JSON string
        try:
            args = loads(args) if args.strip() else {}
        except BadJSON as exc:
            return ToolCall(name, {}, f"the arguments of {name!r} are not valid JSON ({exc})")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCall(name, {}, f'"arguments" must be a JSON object, got {type(args).__name__}')
    return ToolCall(name, args)


def call_from_obj(obj: Any) -> ToolCall:
    """`{"name": ..., "arguments"|"parameters": ...}`, also inside OpenAI's `{"function": {...}}`."""
    if not isinstance(obj, dict):
        return ToolCall("", {}, f"a tool call must be a JSON object, got {type(obj).__name__}")
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI {"type": "function", "function": {...}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", {}, 'the tool call has no "name" string')
    return arguments_of(name, obj.get("arguments", obj.get("parameters", {})))


def calls_from_json(obj: Any) -> list[ToolCall]:
    """One call object or a list of them."""
    if isinstance(obj, list):
        return [call_from_obj(c) for c in obj] or [ToolCall("", {}, "an empty list of tool calls")]
    return [call_from_obj(obj)]


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def head(text: str) -> str:
    return text[:MAX_PARSE_CHARS]
