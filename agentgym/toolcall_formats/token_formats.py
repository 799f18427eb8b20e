"""Formats built from special tokens: DeepSeek V3 / R1 and V3.1, Kimi K2, and gpt-oss harmony.

Blocks are found with `str.find`, never a lazy regex over the whole text, so a megabyte of repeated
begin tokens without an end stays linear."""
from __future__ import annotations

import json
import re
from typing import Any, Iterator, Sequence

from agentgym.toolcall_formats.base import (BadJSON, Schemas, ToolCall, ToolCallFormat, arguments_of, dumps, head,
                                            loads, raw_decode)


class _Nearest:
    """The nearest occurrence at or after a position of any of some markers; each marker's last answer is
    remembered, so scanning a text front to back stays linear (no re-scan for a marker that is absent)."""

    def __init__(self, text: str, markers: Sequence[str]):
        self.text, self.next = text, {m: -2 for m in markers}

    def __call__(self, start: int) -> int:
        for marker, at in self.next.items():
            if at == -2 or (at != -1 and at < start):
                self.next[marker] = self.text.find(marker, start)
        found = [at for at in self.next.values() if at != -1]
        return min(found) if found else len(self.text)


def blocks(text: str, begin: str, ends: Sequence[str]) -> Iterator[str]:
    """The text after each `begin` up to the nearest of `ends` (or the end of the text)."""
    nearest, pos = _Nearest(text, ends), 0
    while (start := text.find(begin, pos)) != -1:
        start += len(begin)
        stop = nearest(start)
        yield text[start:stop]
        pos = stop


def _json_args(name: str, body: str) -> ToolCall:
    body = body.strip()
    if body.startswith("```"):  # DeepSeek V3 fences the arguments
        body = body.removeprefix("```json").removeprefix("```").strip()
        body = body[:body.rfind("```")] if "```" in body else body
    try:
        args = loads(body) if body else {}
    except BadJSON as exc:
        return ToolCall(name, {}, f"the arguments of {name!r} are not valid JSON ({exc})")
    return arguments_of(name, args)


# ------------------------------------------------------------------------------------------------ deepseek
DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def parse_deepseek(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """Both shapes: V3 / R1 `function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```` and V3.1 `NAME<｜tool▁sep｜>{...}`."""
    calls = []
    for body in blocks(head(text), DS_CALL_BEGIN, (DS_CALL_END, DS_CALL_BEGIN, DS_CALLS_END)):
        left, sep, right = body.partition(DS_SEP)
        if not sep:
            calls.append(ToolCall("", {}, f"a DeepSeek tool call needs NAME{DS_SEP}ARGUMENTS between "
                                          f"{DS_CALL_BEGIN} and {DS_CALL_END}"))
            continue
        if left.strip() == "function":  # V3 / R1: the type, then the name on its own line, then fenced JSON
            name, _, args = right.partition("\n")
        else:
            name, args = left, right
        name = name.strip()
        calls.append(_json_args(name, args) if name else ToolCall("", {}, "the DeepSeek tool call has no name"))
    return calls


def _looks_deepseek(text: str) -> bool:
    return "tool▁call" in text


DEEPSEEK_V3 = ToolCallFormat(
    "deepseek_v3", "DeepSeek V3 / R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n"
    "```json\\n{...}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    parse_deepseek, _looks_deepseek,
    lambda c: f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}{c.name}\n```json\n{dumps(c.arguments)}\n```"
              f"{DS_CALL_END}{DS_CALLS_END}", None, (DS_SEP, "```json"))

DEEPSEEK_V31 = ToolCallFormat(
    "deepseek_v31", "DeepSeek V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    parse_deepseek, _looks_deepseek,
    lambda c: f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}{c.name}{DS_SEP}{dumps(c.arguments)}{DS_CALL_END}{DS_CALLS_END}",
    None, (DS_SEP,))


# ------------------------------------------------------------------------------------------------ kimi k2
K2_SECTION_BEGIN, K2_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K2_CALL_BEGIN, K2_ARG, K2_CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_K2_ID = re.compile(r"^(?:functions\.)?(.+?)(?::\d+)?$", re.S)


def parse_kimi_k2(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """`<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>`, in a section."""
    calls = []
    for body in blocks(head(text), K2_CALL_BEGIN, (K2_CALL_END, K2_CALL_BEGIN, K2_SECTION_END)):
        call_id, sep, args = body.partition(K2_ARG)
        match = _K2_ID.match(call_id.strip())
        if not sep or match is None:
            calls.append(ToolCall("", {}, f"a Kimi tool call is functions.NAME:0{K2_ARG}{{...}} between "
                                          f"{K2_CALL_BEGIN} and {K2_CALL_END}"))
            continue
        calls.append(_json_args(match.group(1).strip(), args))
    return calls


KIMI_K2 = ToolCallFormat(
    "kimi_k2", "Kimi K2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0"
    "<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>",
    parse_kimi_k2, lambda text: K2_CALL_BEGIN in text or K2_SECTION_BEGIN in text,
    lambda c: f"{K2_SECTION_BEGIN}{K2_CALL_BEGIN}functions.{c.name}:0{K2_ARG}{dumps(c.arguments)}{K2_CALL_END}"
              f"{K2_SECTION_END}", None, (K2_SECTION_BEGIN,))


# ------------------------------------------------------------------------------------------------ harmony
_RECIPIENT = "to=functions."
_H_MESSAGE, _H_ENDS = "<|message|>", ("<|call|>", "<|end|>", "<|return|>", "<|start|>")
_H_NAME = re.compile(r"[^\s<]+")


def parse_harmony(text: str, schemas: Schemas | None = None) -> list[ToolCall]:
    """gpt-oss: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>` (the
    recipient may also stand in the header before `<|channel|>`)."""
    text, calls, pos = head(text), [], 0
    nearest_end, nearest_message = _Nearest(text, _H_ENDS), _Nearest(text, (_H_MESSAGE,))
    while (at := text.find(_RECIPIENT, pos)) != -1:
        start = at + len(_RECIPIENT)
        match = _H_NAME.match(text, start)
        message = nearest_message(start)
        if match is None or message == len(text):
            calls.append(ToolCall("", {}, f"write {_RECIPIENT}NAME <|constrain|>json{_H_MESSAGE}{{...}}<|call|>"))
            break
        body_start = message + len(_H_MESSAGE)
        stop = nearest_end(body_start)
        calls.append(_harmony_args(match.group(0), text[body_start:stop]))
        pos = stop
    return calls


def _harmony_args(name: str, body: str) -> ToolCall:
    body = body.strip()
    try:  # a call's message is one JSON object; text after it (a stray token) is not the arguments
        args, _ = raw_decode(body, 0) if body else ({}, 0)
    except BadJSON as exc:
        return ToolCall(name, {}, f"the arguments of {name!r} are not valid JSON ({exc})")
    return arguments_of(name, args)


_TS_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean",
             "array": "any[]", "object": "object"}


def _ts_type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    return _TS_TYPES.get(str(schema.get("type")), "any")


def harmony_tools_prompt(schemas: Sequence[dict[str, Any]]) -> str:
    """Harmony's developer-message tool section: a TypeScript-like `namespace functions`."""
    lines = ["\n\n# Tools\n\n## functions\n\nnamespace functions {\n"]
    for schema in schemas:
        fn = schema.get("function", schema)
        params = fn.get("parameters") or {}
        required = set(params.get("required", ()))
        lines.append(f"// {fn.get('description', '')}")
        lines.append(f"type {fn.get('name')} = (_: {{")
        for pname, p in dict(params.get("properties", {})).items():
            if p.get("description"):
                lines.append(f"// {p['description']}")
            default = f", // default: {json.dumps(p['default'])}" if "default" in p else ","
            lines.append(f"{pname}{'' if pname in required else '?'}: {_ts_type(p)}{default}")
        lines.append("}) => any;\n")
    lines.append("} // namespace functions\n\nCall a function in the commentary channel: "
                 "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>")
    return "\n".join(lines)


HARMONY = ToolCallFormat(
    "harmony", "gpt-oss (harmony): <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json"
    "<|message|>{...}<|call|>",
    parse_harmony, lambda text: _RECIPIENT in text or "<|call|>" in text,
    lambda c: f"<|channel|>commentary {_RECIPIENT}{c.name} <|constrain|>json{_H_MESSAGE}{dumps(c.arguments)}<|call|>",
    harmony_tools_prompt, ("<|channel|>", "<|message|>"))
