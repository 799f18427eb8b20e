"""The registry of tool-call formats: how each model family writes a tool call, and which one a model uses.

    FORMATS["llama3"].parse('<|python_tag|>{"name": "f", "parameters": {"x": 1}}')   # [ToolCall("f", {"x": 1})]
    detect_format(tokenizer.chat_template)                                          # "hermes", "llama3", ...
    looks_like_call(text)                                                          # the format a text attempts

Formats (module `json_formats`, `token_formats`, `xml_formats`):

    hermes        <tool_call>{"name": ..., "arguments": {...}}</tool_call>     Qwen2.5/3, SmolLM3, Hermes
    openai        {"tool_calls": [...]} / {"name": ..., "arguments": ...}      any model asked for bare JSON
    llama3        {"name": ..., "parameters": {...}}, <|python_tag|>, `;`       Llama 3.1 / 3.2 / 3.3
    mistral       [TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ..}]  Mistral 7B v0.3, Nemo, Small 3
    mistral_v11   [TOOL_CALLS]NAME[ARGS]{...}                                Mistral Small 3.2, Magistral, Devstral
    granite       <|tool_call|>[{"name": ..., "arguments": {...}}]            Granite 3.x, Phi-4-mini
    qwen3_coder   <tool_call><function=NAME><parameter=K>v</parameter>...     Qwen3-Coder, Qwen3.5
    glm45         <tool_call>NAME<arg_key>K</arg_key><arg_value>v</arg_value> GLM-4.5 / 4.6 / 4.7
    deepseek_v3   <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json{...}```  DeepSeek V3, R1
    deepseek_v31  <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}                  DeepSeek V3.1
    kimi_k2       <|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}   Kimi K2
    harmony       <|channel|>commentary to=functions.NAME ... <|message|>{...}<|call|>   gpt-oss

The registry's order is the order of detection: the more specific marker first (Qwen3-Coder and GLM
templates contain `<tool_call>` too, so they come before Hermes).
"""
from __future__ import annotations

import difflib
from typing import Any, Sequence

from agentgym.errors import ConfigError
from agentgym.toolcall_formats.base import MAX_PARSE_CHARS, Schemas, ToolCall, ToolCallFormat
from agentgym.toolcall_formats.json_formats import GRANITE, HERMES, LLAMA3, MISTRAL, MISTRAL_V11, OPENAI
from agentgym.toolcall_formats.token_formats import DEEPSEEK_V3, DEEPSEEK_V31, HARMONY, KIMI_K2
from agentgym.toolcall_formats.xml_formats import GLM45, QWEN3_CODER

__all__ = ["DEFAULT_FORMAT", "FORMATS", "MAX_PARSE_CHARS", "Schemas", "ToolCall", "ToolCallFormat", "detect_format",
           "get_format", "looks_like_call", "register_format"]

FORMATS: dict[str, ToolCallFormat] = {}
DEFAULT_FORMAT = "hermes"  # what a template without any tool-call marker is prompted with (today's rendering)


def register_format(fmt: ToolCallFormat) -> ToolCallFormat:
    """Add a format (a later one with the same name replaces it); detection tries formats in this order."""
    FORMATS[fmt.name] = fmt
    return fmt


for _fmt in (HARMONY, KIMI_K2, DEEPSEEK_V3, DEEPSEEK_V31, MISTRAL_V11, MISTRAL, GRANITE, QWEN3_CODER, GLM45, HERMES,
             LLAMA3, OPENAI):
    register_format(_fmt)


def get_format(name: str) -> ToolCallFormat:
    """The format called `name`; a `ConfigError` listing the known ones (with a did-you-mean) otherwise."""
    fmt = FORMATS.get(name)
    if fmt is None:
        close = difflib.get_close_matches(str(name), list(FORMATS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown tool-call format {name!r}{hint}; known: {', '.join(FORMATS)}, or 'auto'")
    return fmt


def detect_format(chat_template: str | None, special_tokens: Sequence[str] = ()) -> str:
    """The tool-call format a chat template (and its tokenizer's special tokens) speaks: the first
    registered format all of whose markers appear; `DEFAULT_FORMAT` when none does."""
    text = (chat_template or "") + "\n" + "\n".join(map(str, special_tokens))
    for fmt in FORMATS.values():
        if fmt.template_markers and all(marker in text for marker in fmt.template_markers):
            return fmt.name
    return DEFAULT_FORMAT


def detect_from_tokenizer(tokenizer: Any) -> str:
    """`detect_format` on a Hugging Face tokenizer's template and special / added tokens."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # a tokenizer with named templates: the tool-use one says most
        template = "\n".join(str(t) for t in template.values())
    tokens = list(getattr(tokenizer, "all_special_tokens", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    tokens += [str(getattr(t, "content", t)) for t in added.values()]
    return detect_format(template if isinstance(template, str) else None, tokens)


def looks_like_call(text: str, formats: Sequence[str] | None = None) -> str | None:
    """The first format (in registry order, or among `formats`) whose call `text` attempts; None for none."""
    head = text[:MAX_PARSE_CHARS]
    for name in formats or FORMATS:
        fmt = FORMATS.get(name)
        if fmt is not None and fmt.looks_like(head):
            return fmt.name
    return None


def parse_calls(text: str, formats: Sequence[str], schemas: Schemas | None = None) -> list[ToolCall]:
    """The calls of the first of `formats` that finds any; [] when none does."""
    for name in formats:
        calls = get_format(name).parse(text, schemas)
        if calls:
            return calls
    return []
