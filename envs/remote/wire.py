"""What crosses the wire between an env server and `RemoteEnv`: JSON that decodes to the same Python values.

JSON has no tuples, sets or bytes, but anchors must come back hashable and equal to what the env returned
(GiGPO groups on them), and infos may carry tool results. So values are encoded as JSON, with tagged objects
for the rest (a plain dict never has a key starting with "__agentgym_"):

    str, int, float, bool, None, list   as themselves         dict with str keys   as itself
    tuple                               {"__agentgym_tuple__": [...]}
    frozenset / set                     {"__agentgym_frozenset__" / "__agentgym_set__": [...]}  (sorted by repr)
    bytes                               {"__agentgym_bytes__": base64}
    ToolResult                          {"__agentgym_tool_result__": {name, output, ok, arguments, seconds}}
    dict with other keys                {"__agentgym_dict__": [[key, value], ...]}
    numpy scalars                       their Python value
    anything else                       {"__agentgym_repr__": "<type>: repr"}  -> decodes to the tuple
                                        ("__agentgym_repr__", that text): hashable, equal when the reprs are

Strings keep lone surrogates (json escapes them), so nothing an env says is lost on the way.
"""
from __future__ import annotations

import base64
from typing import Any

from agentgym.toolcalls import Tool, ToolResult

_TUPLE, _SET, _FROZENSET = "__agentgym_tuple__", "__agentgym_set__", "__agentgym_frozenset__"
_BYTES, _TOOL_RESULT, _DICT, _REPR = "__agentgym_bytes__", "__agentgym_tool_result__", "__agentgym_dict__", \
    "__agentgym_repr__"
_TAGS = (_TUPLE, _SET, _FROZENSET, _BYTES, _TOOL_RESULT, _DICT, _REPR)
MAX_DEPTH = 64


def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-ready form of `value` that `decode` turns back into an equal value."""
    if depth > MAX_DEPTH:
        return {_REPR: f"too deep: {str(value)[:200]}"}
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, list):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return {_TUPLE: [encode(v, depth + 1) for v in value]}
    if isinstance(value, (set, frozenset)):
        tag = _FROZENSET if isinstance(value, frozenset) else _SET
        return {tag: [encode(v, depth + 1) for v in sorted(value, key=repr)]}
    if isinstance(value, (bytes, bytearray)):
        return {_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, ToolResult):
        return {_TOOL_RESULT: {"name": value.name, "output": value.output, "ok": value.ok,
                               "arguments": encode(value.arguments, depth + 1), "seconds": value.seconds}}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__agentgym_") for k in value):
            return {k: encode(v, depth + 1) for k, v in value.items()}
        return {_DICT: [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    item = getattr(value, "item", None)   # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return encode(item(), depth)
    return {_REPR: f"{type(value).__name__}: {value!r}"}


def decode(value: Any) -> Any:
    """The inverse of `encode`."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, inner), = value.items()
        if tag in _TAGS:
            return _decode_tagged(tag, inner)
    return {k: decode(v) for k, v in value.items()}


def _decode_tagged(tag: str, inner: Any) -> Any:
    if tag == _TUPLE:
        return tuple(decode(v) for v in inner)
    if tag == _SET:
        return {decode(v) for v in inner}
    if tag == _FROZENSET:
        return frozenset(decode(v) for v in inner)
    if tag == _BYTES:
        return base64.b64decode(inner)
    if tag == _TOOL_RESULT:
        return ToolResult(str(inner["name"]), str(inner["output"]), bool(inner["ok"]), decode(inner["arguments"]),
                          float(inner["seconds"]))
    if tag == _DICT:
        return {_hashable(decode(k)): decode(v) for k, v in inner}
    return (_REPR, str(inner))


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _runs_remotely(**arguments: Any) -> str:
    raise RuntimeError("this tool runs on the env server; RemoteEnv sends the whole action there")


def remote_tool(schema: dict[str, Any]) -> Tool:
    """A `Tool` with the name, description and parameters a served env's tool has (for the system prompt
    and `usage()` examples); calling it locally is an error, the env server runs it."""
    function = schema.get("function", schema) if isinstance(schema, dict) else {}
    tool = Tool(_runs_remotely, name=str(function.get("name", "tool")),
                description=str(function.get("description", "")) or None)
    parameters = function.get("parameters")
    if isinstance(parameters, dict):
        tool.parameters = {"type": "object", "properties": dict(parameters.get("properties", {})),
                           "required": list(parameters.get("required", []))}
    return tool
