"""Formats whose calls are JSON objects: Hermes (Qwen2.5/Qwen3, SmolLM3, Hermes), bare OpenAI JSON, Llama 3.x,
Mistral (the JSON list and the v11+ `name[ARGS]{...}` form) and Granite / Phi-4-mini (`<|tool_call|>`)."""
from __future__ import annotations

import json
import re
from typing import Any, Sequence

from agentgym.toolcall_formats.base import (BadJSON, Schemas, ToolCall, ToolCallFormat, arguments_of, call_from_obj,
                                            calls_from_json, dumps, head, loads, raw_decode)

# ------------------------------------------------------------------------------------------------ hermes
_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)

HERMES_TOOLS_PROMPT = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{schemas}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}"
    "\n</tool_call>")


def parse_hermes(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """Every `<tool_call>{json}</tool_call>` block; an unterminated last block is still tried."""
    calls = []
    for body in _HERMES.findall(head(text)):
        try:
            obj = loads(body.strip())
        except BadJSON as exc:
            calls.append(ToolCall("", {}, f"malformed JSON inside <tool_call> ({exc})"))
            continue
        calls.append(call_from_obj(obj))
    return calls


def _listing(schemas: Sequence[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)


HERMES = ToolCallFormat(
    "hermes", "Hermes / Qwen2.5 / Qwen3 / SmolLM3: <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>",
    parse_hermes, lambda text: "<tool_call>" in text,
    lambda c: f'<tool_call>{{"name": "{c.name}", "arguments": {dumps(c.arguments)}}}</tool_call>',
    lambda schemas: HERMES_TOOLS_PROMPT.format(schemas=_listing(schemas)), ("<tool_call>",))


# ------------------------------------------------------------------------------------------------ openai
def _unfenced(text: str) -> str:
    stripped = head(text).strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`").removeprefix("json").strip()
    return stripped


def parse_openai_json(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """An OpenAI-style message or call as the whole action: `{"tool_calls": [...]}` or `{"name":..}`."""
    stripped = _unfenced(text)
    if not stripped.startswith(("{", "[")):
        return []
    try:
        obj = loads(stripped)
    except BadJSON:
        return []
    if isinstance(obj, dict) and isinstance(obj.get("tool_calls"), list):
        return [call_from_obj(c) for c in obj["tool_calls"]]
    if isinstance(obj, list):
        return [call_from_obj(c) for c in obj]
    if isinstance(obj, dict) and "name" in obj:
        return [call_from_obj(obj)]
    return []


OPENAI = ToolCallFormat(
    "openai", 'bare OpenAI JSON as the whole reply: {"tool_calls": [...]} or {"name": ..., "arguments": {...}}',
    parse_openai_json, lambda text: _unfenced(text).startswith(("{", "[")) and '"name"' in text[:2000],
    lambda c: dumps({"name": c.name, "arguments": c.arguments}),
    render_many=lambda calls: dumps([{"name": c.name, "arguments": c.arguments} for c in calls]))


# ------------------------------------------------------------------------------------------------ llama 3
_PYTHON_TAG = "<|python_tag|>"
_LLAMA_ENDS = ("<|eom_id|>", "<|eot_id|>")


def _json_sequence(text: str, separators: str = ";, \n\t") -> tuple[list[ToolCall], str]:
    """Calls from JSON objects one after another (`;`-separated in Llama 3), and the text left after them."""
    calls: list[ToolCall] = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos] in separators:
            pos += 1
        if pos >= len(text) or text[pos] not in "{[":
            break
        try:
            obj, pos = raw_decode(text, pos)
        except BadJSON as exc:
            calls.append(ToolCall("", {}, f"malformed JSON in the tool call ({exc})"))
            return calls, ""
        calls += calls_from_json(obj)
    return calls, text[pos:]


def parse_llama3(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """`{"name": ..., "parameters": {...}}` as the reply, optionally after `<|python_tag|>`, several `;`-separated."""
    body = head(text).strip()
    for end in _LLAMA_ENDS:
        body = body.removesuffix(end).rstrip()
    tagged = _PYTHON_TAG in body
    if tagged:
        body = body.split(_PYTHON_TAG, 1)[1].strip()
    body = _unfenced(body)
    if not body.startswith(("{", "[")):
        return [ToolCall("", {}, 'after <|python_tag|> write a JSON object {"name": ..., "parameters": {...}}')] \
            if tagged else []
    calls, _ = _json_sequence(body)
    if not tagged and all(c.error for c in calls):
        return []  # an untagged reply that is not a call is prose that happens to start with a brace
    return calls


def _llama_prompt(schemas: Sequence[dict[str, Any]]) -> str:
    listing = "\n\n".join(json.dumps(s, indent=4, ensure_ascii=False) for s in schemas)
    return ("\n\nYou have access to the following functions. To call a function, respond with a JSON object "
            'in the format {"name": function name, "parameters": dictionary of argument name and its value}, '
            "optionally after <|python_tag|>; separate several calls with `;`. Do not use variables.\n\n" + listing)


LLAMA3 = ToolCallFormat(
    "llama3", 'Llama 3.x: {"name": ..., "parameters": {...}} as the reply, optional <|python_tag|>, several `;`-joined',
    parse_llama3,
    lambda text: _PYTHON_TAG in text or (_unfenced(text).startswith("{") and '"parameters"' in text[:2000]),
    lambda c: dumps({"name": c.name, "parameters": c.arguments}), _llama_prompt, ("<|start_header_id|>",),
    lambda calls: "; ".join(dumps({"name": c.name, "parameters": c.arguments}) for c in calls))


# ------------------------------------------------------------------------------------------------ mistral
_TOOL_CALLS, _ARGS, _CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


def _mistral_named(segment: str) -> list[ToolCall]:
    """`name[ARGS]{...}` (v11+), also `name[CALL_ID]id[ARGS]{...}`, possibly several in a row."""
    calls: list[ToolCall] = []
    pos = 0
    while (at := segment.find(_ARGS, pos)) != -1:
        name = segment[pos:at].split(_CALL_ID, 1)[0].strip()
        if not name:
            return calls + [ToolCall("", {}, "[TOOL_CALLS] must be followed by the tool name, then [ARGS]{...}")]
        start = at + len(_ARGS)
        while start < len(segment) and segment[start].isspace():
            start += 1
        try:
            args, pos = raw_decode(segment, start)
        except BadJSON as exc:
            return calls + [ToolCall(name, {}, f"the arguments of {name!r} after [ARGS] are not valid JSON ({exc})")]
        calls.append(arguments_of(name, args))
    if not calls:
        return [ToolCall("", {}, "after [TOOL_CALLS] write a JSON list of calls or NAME[ARGS]{...}")]
    return calls


def parse_mistral(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """`[TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}]` or `[TOOL_CALLS]name[ARGS]{...}`."""
    text = head(text)
    if _TOOL_CALLS not in text:
        return []
    calls: list[ToolCall] = []
    for segment in text.split(_TOOL_CALLS)[1:]:
        body = segment.strip().removesuffix("</s>").strip()
        if body.startswith(("[", "{")):
            json_calls, _ = _json_sequence(body, separators=" \n\t")
            calls += json_calls
        else:
            calls += _mistral_named(body)
    return calls


MISTRAL = ToolCallFormat(
    "mistral", 'Mistral (v3 tokenizers): [TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": "9 chars"}]',
    parse_mistral, lambda text: _TOOL_CALLS in text,
    lambda c: f"{_TOOL_CALLS} {dumps([{'name': c.name, 'arguments': c.arguments}])}", None, (_TOOL_CALLS,))

MISTRAL_V11 = ToolCallFormat(
    "mistral_v11", "Mistral v11+ tokenizers (Mistral Small 3.2, Magistral, Devstral): [TOOL_CALLS]name[ARGS]{...}",
    parse_mistral, lambda text: _TOOL_CALLS in text,
    lambda c: f"{_TOOL_CALLS}{c.name}{_ARGS}{dumps(c.arguments)}", None, (_TOOL_CALLS, _ARGS))


# ------------------------------------------------------------------------------------------------ granite
_GRANITE, _GRANITE_END = "<|tool_call|>", "<|/tool_call|>"


def parse_granite(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """`<|tool_call|>[{"name": ..., "arguments": {...}}, ...]` (Granite 3.x; Phi-4-mini closes it with `<|/tool_call|>`)."""
    calls: list[ToolCall] = []
    for segment in head(text).split(_GRANITE)[1:]:
        body = segment.split(_GRANITE_END, 1)[0].strip()
        if not body.startswith(("[", "{")):
            calls.append(ToolCall("", {}, 'after <|tool_call|> write a JSON list [{"name": ..., "arguments": {...}}]'))
            continue
        found, _ = _json_sequence(body, separators=" \n\t")
        calls += found
    return calls


GRANITE = ToolCallFormat(
    "granite", 'IBM Granite 3.x / Phi-4-mini: <|tool_call|>[{"name": ..., "arguments": {...}}]',
    parse_granite, lambda text: _GRANITE in text,
    lambda c: f"{_GRANITE}{dumps([{'name': c.name, 'arguments': c.arguments}])}", None, (_GRANITE,))
