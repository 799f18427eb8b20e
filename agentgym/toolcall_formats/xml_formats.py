"""Formats whose arguments are XML-ish key/value pairs: Qwen3-Coder (`<function=NAME><parameter=KEY>`) and
GLM-4.5 / 4.6 (`<arg_key>` / `<arg_value>`). Values are text; each is typed by the tool's JSON schema
(`"3"` for an integer parameter becomes 3), and without a schema JSON-looking values are decoded."""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from agentgym.toolcall_formats.base import BadJSON, Schemas, ToolCall, ToolCallFormat, head, loads
from agentgym.toolcall_formats.token_formats import blocks


def typed_value(raw: str, schema: Mapping[str, Any] | None) -> Any:
    """`raw` as the type the parameter's schema declares; left a string when it does not convert (the
    tool's validation then says what type was expected)."""
    kind = (schema or {}).get("type")
    if kind == "string":
        return raw
    text = raw.strip()
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            value = float(text)
            return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind in ("object", "array", None) or not isinstance(kind, str):
            return loads(text)
    except (ValueError, BadJSON):
        pass
    if text in ("null", "None") and kind is not None:
        return None
    return raw


_NAME = re.compile(r"[^\s<>{}\[\]\"']+")  # a tool name: no whitespace, tags or JSON
_GLM_CALL = re.compile(r"<tool_call>\s*[^\s<>{}\[\]\"']+\s*(?:<arg_key>|</tool_call>)")


def _params(schemas: Schemas | None, name: str) -> Mapping[str, Any]:
    return dict((schemas or {}).get(name, {}).get("properties", {}) or {})


def _trim_newline(value: str) -> str:
    """The templates put each value on its own line: one newline either side is layout, not content."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _render_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# ------------------------------------------------------------------------------------------------ qwen3-coder
def parse_qwen3_coder(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """`<tool_call><function=NAME><parameter=KEY>value</parameter>...</function></tool_call>`."""
    calls = []
    for body in blocks(head(text), "<function=", ("</function>", "<function=")):
        name, closed, rest = body.partition(">")
        name = name.strip()
        if not closed or not _NAME.fullmatch(name):
            calls.append(ToolCall("", {}, "write <function=NAME> then <parameter=KEY>value</parameter> per argument"))
            continue
        props, args = _params(schemas, name), {}
        for param in blocks(rest, "<parameter=", ("</parameter>", "<parameter=")):
            key, closed, value = param.partition(">")
            if not closed or not key.strip():
                calls.append(ToolCall(name, {}, f"a parameter of {name!r} is not <parameter=KEY>value</parameter>"))
                break
            args[key.strip()] = typed_value(_trim_newline(value), props.get(key.strip()))
        else:
            calls.append(ToolCall(name, args))
    return calls


def _render_qwen3_coder(call: ToolCall) -> str:
    params = "".join(f"<parameter={k}>\n{_render_value(v)}\n</parameter>\n" for k, v in call.arguments.items())
    return f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>"


QWEN3_CODER = ToolCallFormat(
    "qwen3_coder", "Qwen3-Coder / Qwen3.5 XML: <tool_call><function=NAME><parameter=KEY>value</parameter>"
    "</function></tool_call>",
    parse_qwen3_coder, lambda text: "<function=" in text, _render_qwen3_coder, None, ("<function=", "<parameter="))


# ------------------------------------------------------------------------------------------------ glm-4.5
def parse_glm45(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """`<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>` (GLM-4.5, 4.6, 4.7)."""
    calls = []
    for body in blocks(head(text), "<tool_call>", ("</tool_call>", "<tool_call>")):
        name, has_args, pairs = body.partition("<arg_key>")
        name = name.strip()
        if not _NAME.fullmatch(name):
            calls.append(ToolCall("", {}, "write <tool_call>NAME then <arg_key>KEY</arg_key><arg_value>VALUE"
                                          "</arg_value> per argument, then </tool_call>"))
            continue
        props, args, error = _params(schemas, name), {}, None
        for pair in pairs.split("<arg_key>") if has_args else []:
            key, closed, after = pair.partition("</arg_key>")
            value_open = after.find("<arg_value>")
            value_close = after.find("</arg_value>")
            if not closed or value_open == -1 or value_close < value_open:
                error = f"an argument of {name!r} is not <arg_key>KEY</arg_key><arg_value>VALUE</arg_value>"
                break
            value = after[value_open + len("<arg_value>"):value_close]
            args[key.strip()] = typed_value(value, props.get(key.strip()))
        calls.append(ToolCall(name, {} if error else args, error))
    return calls


def _render_glm45(call: ToolCall) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_render_value(v)}</arg_value>\n"
                    for k, v in call.arguments.items())
    return f"<tool_call>{call.name}\n{pairs}</tool_call>"


GLM45 = ToolCallFormat(
    "glm45", "GLM-4.5 / 4.6 / 4.7: <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>",
    parse_glm45, lambda text: "<arg_key>" in text or _GLM_CALL.search(text) is not None, _render_glm45, None, ("<arg_key>",))
