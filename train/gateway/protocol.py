"""The OpenAI chat-completions shapes the gateway speaks: request checks, response bodies, OpenAI-style errors.

Pure functions of JSON values. A request is checked field by field and anything the gateway cannot honour
(n > 1, top_logprobs, penalties, a forced tool choice, a response format) is refused with a 400 that names
the field, never ignored. Responses carry OpenAI's fields plus two extensions a trainer-side client may read
(vLLM spells them the same way): `prompt_token_ids` and `choices[0].token_ids`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from agentgym.policy import SamplingParams

ROLES = ("system", "developer", "user", "assistant", "tool")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # OpenAI's rule for function names
# fields a harness may send that change nothing here (OpenAI bookkeeping)
IGNORED_FIELDS = frozenset({"model", "user", "metadata", "store", "service_tier", "parallel_tool_calls",
                            "stream_options", "prompt_cache_key", "safety_identifier"})


class GatewayError(Exception):
    """An answer in OpenAI's error shape: {"error": {"message", "type", "param", "code"}} with an HTTP status."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _bad(message: str, param: str | None, code: str = "invalid_value") -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


@dataclass(frozen=True)
class ChatRequest:
    """A checked request: messages with plain-text content, tool schemas (None: no tools), sampling."""

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None
    sampling: SamplingParams
    stream: bool = False
    logprobs: bool = False
    parse_tools: bool = True      # tool_choice "none": the completion is returned as text
    include_usage: bool = False   # stream_options.include_usage: a last chunk with the token counts


def check_tools(tools: Any) -> tuple[dict[str, Any], ...] | None:
    """OpenAI function tools, checked: [{"type": "function", "function": {"name", "description"?,
    "parameters"? (a JSON-schema object)}}]."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _bad(f"tools must be a list of {{'type': 'function', 'function': {{...}}}}, got {type(tools).__name__}",
                   "tools", "invalid_tools")
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise _bad(f"{where} must be {{'type': 'function', 'function': {{'name': ..., 'parameters': {{...}}}}}}",
                       where, "invalid_tools")
        fn = tool["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise _bad(f"{where}.function.name must be 1-64 letters, digits, '_', '-' or '.', got {name!r}",
                       f"{where}.function.name", "invalid_tools")
        if "description" in fn and not isinstance(fn["description"], str):
            raise _bad(f"{where}.function.description must be a string", f"{where}.function.description",
                       "invalid_tools")
        params = fn.get("parameters")
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"
                                   or not isinstance(params.get("properties", {}), dict)):
            raise _bad(f"{where}.function.parameters must be a JSON-schema object ({{'type': 'object', "
                       f"'properties': {{...}}}}), got {json.dumps(params)[:120]}", f"{where}.function.parameters",
                       "invalid_tools")
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise _bad(f"tools name one function twice: {sorted(n for n in set(names) if names.count(n) > 1)}", "tools",
                   "invalid_tools")
    return tuple(tools) or None


def _text(content: Any, where: str) -> str | None:
    """A message's content as text: a string, text parts joined, or None."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"{where}.content[{k}]: only text parts ({{'type': 'text', 'text': ...}}) are served here",
                           f"{where}.content")
            parts.append(part["text"])
        return "".join(parts)
    raise _bad(f"{where}.content must be a string or a list of text parts", f"{where}.content")


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise _bad(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
    for k, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments", ""),
                                                                                           str):
            raise _bad(f"{where}.tool_calls[{k}] must be {{'id', 'type': 'function', 'function': {{'name', "
                       "'arguments': a JSON string}}}}", f"{where}.tool_calls")
    return calls


def check_messages(messages: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list of {'role': ..., 'content': ...}", "messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _bad(f"{where}.role must be one of {', '.join(ROLES)}", f"{where}.role")
        msg: dict[str, Any] = {"role": m["role"], "content": _text(m.get("content"), where)}
        if m["role"] == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m["tool_calls"], where)
        elif msg["content"] is None:
            raise _bad(f"{where}.content is missing", f"{where}.content")
        if m["role"] == "tool":
            msg["tool_call_id"] = str(m.get("tool_call_id", ""))
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        out.append(msg)
    return tuple(out)


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise _bad(f"{key} must be a number in [{lo}, {hi}], got {value!r}", key)
    return float(value)


def parse_chat_request(body: Any, max_new_tokens: int) -> ChatRequest:
    """Check a /v1/chat/completions body; `max_new_tokens` is the gateway's limit (the default too)."""
    if not isinstance(body, dict):
        raise _bad("the body must be a JSON object", None)
    unsupported = {"n": lambda v: v not in (None, 1), "top_logprobs": lambda v: v not in (None, 0),
                   "presence_penalty": lambda v: v not in (None, 0), "frequency_penalty": lambda v: v not in (None, 0),
                   "logit_bias": lambda v: bool(v), "response_format": lambda v: v not in (None, {"type": "text"}),
                   "tool_choice": lambda v: v not in (None, "auto", "none"), "audio": lambda v: v is not None,
                   "modalities": lambda v: v not in (None, ["text"]), "prediction": lambda v: v is not None,
                   "reasoning_effort": lambda v: v is not None, "web_search_options": lambda v: v is not None}
    for key, refused in unsupported.items():
        if refused(body.get(key)):
            raise _bad(f"{key}={json.dumps(body.get(key))[:80]} is not supported by this gateway (it records one "
                       f"sampled completion per call); leave it out", key, "unsupported_parameter")
    known = {"messages", "tools", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed",
             "stream", "logprobs", *unsupported, *IGNORED_FIELDS}
    unknown = sorted(set(body) - known)
    if unknown:
        raise _bad(f"unrecognized request argument(s): {', '.join(unknown)}", unknown[0], "unknown_parameter")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is None:
        limit = max_new_tokens
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_new_tokens:
        raise _bad(f"max_tokens must be an integer in [1, {max_new_tokens}] (the gateway's --max-new-tokens), "
                   f"got {limit!r}", "max_tokens")
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise _bad("stop must be a string or a list of at most 4 non-empty strings", "stop")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad(f"seed must be an integer, got {seed!r}", "seed")
    for flag in ("stream", "logprobs"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            raise _bad(f"{flag} must be true or false", flag)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise _bad("top_p must be > 0", "top_p")
    sampling = SamplingParams(temperature=_number(body, "temperature", 1.0, 0.0, 2.0), top_p=top_p, max_tokens=limit,
                              stop=stops, seed=seed)
    options = body.get("stream_options") or {}
    return ChatRequest(check_messages(body.get("messages")), check_tools(body.get("tools")), sampling,
                       bool(body.get("stream")), bool(body.get("logprobs")), body.get("tool_choice") != "none",
                       bool(isinstance(options, dict) and options.get("include_usage")))


def tool_call_objects(calls: Sequence[Any], id_prefix: str) -> list[dict[str, Any]]:
    """Parsed `ToolCall`s as OpenAI `tool_calls` entries with ids unique to this call."""
    return [{"id": f"{id_prefix}_{k}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for k, c in enumerate(calls)]


def logprob_content(ids: Sequence[int], logprobs: Sequence[float], token_text: Callable[[int], str]
                    ) -> list[dict[str, Any]]:
    out = []
    for i, lp in zip(ids, logprobs):
        text = token_text(i)
        out.append({"token": text, "logprob": float(lp) if lp == lp else None,  # NaN: the engine did not say
                    "bytes": list(text.encode()), "top_logprobs": []})
    return out


@dataclass(frozen=True)
class Answer:
    """What one call returns, before it is shaped as a body or a stream."""

    id: str
    model: str
    created: int
    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: list[dict[str, Any]] | None
    session_call: int

    def usage(self) -> dict[str, int]:
        p, c = len(self.prompt_ids), len(self.completion_ids)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def completion_body(a: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": a.content}
    if a.tool_calls:
        message["tool_calls"] = a.tool_calls
    return {"id": a.id, "object": "chat.completion", "created": a.created, "model": a.model,
            "choices": [{"index": 0, "message": message, "finish_reason": a.finish_reason,
                         "logprobs": None if a.logprobs is None else {"content": a.logprobs},
                         "token_ids": list(a.completion_ids)}],
            "usage": a.usage(), "prompt_token_ids": list(a.prompt_ids), "session_call": a.session_call}


def stream_chunks(a: Answer, include_usage: bool) -> list[dict[str, Any]]:
    """The answer as chat.completion.chunk objects (the whole text in one delta: the engine generates a call at
    once), the finish reason in the last one, then the usage chunk when asked."""
    head = {"id": a.id, "object": "chat.completion.chunk", "created": a.created, "model": a.model}
    delta: dict[str, Any] = {"role": "assistant", "content": a.content}
    if a.tool_calls:
        delta["tool_calls"] = [{"index": k, **c} for k, c in enumerate(a.tool_calls)]
    chunks = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None,
                                    "logprobs": None if a.logprobs is None else {"content": a.logprobs}}]},
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": a.finish_reason,
                                    "token_ids": list(a.completion_ids)}]}]
    if include_usage:
        chunks.append({**head, "choices": [], "usage": a.usage()})
    return chunks


def streams_tokens(request: ChatRequest, engine_streams: bool) -> bool:
    """Whether a streamed call is sent token by token as the engine samples it: the engine reports its tokens,
    and nothing decides the text only at the end (a tool call parsed from the whole completion, a stop string
    cut from it). Otherwise it is sent by `stream_chunks` once generated."""
    return request.stream and engine_streams and not (request.tools and request.parse_tools) \
        and not request.sampling.stop


class TextDeltas:
    """Token ids in, text deltas out, as a stream sends them: the text of all tokens but the newest (the newest
    may be the end-of-turn token the answer leaves out, or half of a character), less what was sent.
    `rest(final)` is what the finished answer adds to that."""

    def __init__(self, decode: Callable[[Sequence[int]], str]):
        self.decode, self.sent = decode, ""
        self.ids: list[int] = []

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        text = self.decode(self.ids[:-1])
        if not text.startswith(self.sent) or text.endswith("\ufffd"):  # a character still cut: wait
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta

    def rest(self, final: str) -> str:
        return final[len(self.sent):] if final.startswith(self.sent) else ""


def text_chunk(head: dict[str, Any], delta: dict[str, Any], **choice: Any) -> dict[str, Any]:
    """One chat.completion.chunk of a token-by-token stream (`head`: its id, object, created and model)."""
    return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None, **choice}]}


def stream_tail(a: Answer, rest: str, include_usage: bool) -> list[dict[str, Any]]:
    """A token-by-token stream's last chunks: what the finished answer adds to the text sent, the finish reason
    with the completion's token ids and log-probs, then the usage chunk when asked."""
    head = {"id": a.id, "object": "chat.completion.chunk", "created": a.created, "model": a.model}
    chunks = [text_chunk(head, {"content": rest})] if rest else []
    chunks.append(text_chunk(head, {}, finish_reason=a.finish_reason, token_ids=list(a.completion_ids),
                             logprobs=None if a.logprobs is None else {"content": a.logprobs}))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": a.usage()})
    return chunks
