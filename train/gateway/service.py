"""One chat completion end to end, without HTTP: session -> prompt ids -> engine -> recorded call -> answer.

The prompt is the chat template's rendering of the request's messages with every assistant message the
gateway generated earlier in the session replaced by the ids it generated (`ChatFormat.expected_ids`
splices them in; only the template's text around them is tokenised). An assistant message it cannot match
(the harness edited or wrote it) is rendered as text, which is prompt, never trained on. The completion's
ids and log-probs are the engine's own.
"""
from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from agentgym.chat import ChatFormat
from agentgym.policy import GenerationRequest
from agentgym.toolcall_formats import ToolCall, get_format
from agentgym.train.gateway.engine import Engine
from agentgym.train.gateway.merge import session_summary, session_trajectory
from agentgym.train.gateway.protocol import Answer, ChatRequest, GatewayError, logprob_content, parse_chat_request, \
    tool_call_objects
from agentgym.train.gateway.sessions import Call, Session, SessionStore


@dataclass(frozen=True)
class GatewayConfig:
    model: str = "agentgym"            # the name /v1/models lists and answers carry
    max_new_tokens: int = 256          # a call's max_tokens limit, and its default
    max_context_tokens: int | None = None  # prompt + max_tokens beyond this: 400 context_length_exceeded
    max_sessions: int = 256            # open at once; more are refused (429)
    max_batch: int = 32                # calls generated in one batch
    max_waiting: int = 1024            # calls queued for the engine; more are refused (429)
    max_body_bytes: int = 4 << 20      # a larger request body: 413

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "max_sessions", "max_batch", "max_waiting", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class ClientGone(Exception):
    """The caller hung up before its answer: the call is not recorded."""


class Gateway:
    """The gateway's state: the policy behind a batching engine, the chat format, the sessions."""

    def __init__(self, policy: Any, chat: ChatFormat, config: GatewayConfig | None = None,
                 record: str | None = None):
        self.config = config or GatewayConfig()
        self.record = record  # a JSONL file each closed session's trajectory is appended to (the CLI's --record)
        self.chat = chat
        self.engine = Engine(policy, self.config.max_batch, self.config.max_waiting)
        self.store = SessionStore(self.config.max_sessions)
        self.version = 0   # the weights' version new calls are stamped with (the collector sets it)
        self.served = 0

    # ------------------------------------------------------------------ sessions (Python API)
    def open_session(self, task: Any = None, group: int = 0, sample: int = 0) -> Session:
        return self.store.open(task, group, sample)

    def session(self, sid: str) -> Session:
        return self.store.get(sid)

    def close_session(self, sid: str, reward: float | None = None, success: bool | None = None,
                      error: str | None = None) -> Session:
        session = self.store.close(sid, reward, success, error)
        if self.record:  # a reward sent later (POST .../reward after close) is not in this line
            line = json.dumps({"session": session_summary(session),
                               "trajectory": session_trajectory(session, session.group, session.sample).to_dict()})
            with open(self.record, "a") as f:
                f.write(line + "\n")
        return session

    def reward(self, sid: str, reward: float, call: int | None = None, success: bool | None = None) -> Session:
        return self.store.reward(sid, reward, call, success)

    def close(self) -> None:
        self.engine.close()

    # ------------------------------------------------------------------ a call
    def prompt_ids(self, session: Session, request: ChatRequest) -> tuple[list[int], int, int]:
        """(prompt ids, assistant messages spliced from recorded completions, assistant messages tokenised)."""
        messages: list[dict[str, Any]] = []
        spliced = retokenized = 0
        for m in request.messages:
            if m["role"] != "assistant":
                role = "system" if m["role"] == "developer" else m["role"]
                messages.append({**m, "role": role})
                continue
            recorded = self._recorded(session, m)
            if recorded is not None:
                messages.append({"role": "assistant", "content": m["content"] or "", "token_ids": list(recorded)})
                spliced += 1
                continue
            retokenized += 1
            messages.append({"role": "assistant", "content": (m["content"] or "") + self._calls_text(m)})
        tools = list(request.tools or ())
        if tools and not self.chat.supports_tools:  # the engine's tool prompt goes in the system text
            if messages and messages[0]["role"] == "system":
                messages[0] = {**messages[0], "content": self.chat.system_text(messages[0]["content"], tools)}
            else:
                messages.insert(0, {"role": "system", "content": self.chat.system_text("", tools)})
        try:
            prompt = self.chat.expected_ids(messages, tools or None, add_generation_prompt=True)
        except Exception as exc:  # the template refused the conversation (roles out of order, ...)
            raise GatewayError(400, f"the model's chat template cannot render these messages: {exc}", param="messages",
                               code="template_error") from exc
        return prompt, spliced, retokenized

    @staticmethod
    def _recorded(session: Session, message: dict[str, Any]) -> tuple[int, ...] | None:
        calls = message.get("tool_calls") or ()
        if calls:
            return session.completions_by_tool_call.get(str(calls[0].get("id", "")))
        return session.completions_by_text.get(message["content"] or "")

    def _calls_text(self, message: dict[str, Any]) -> str:
        """Tool calls the gateway did not generate, written in the engine's tool-call format."""
        calls = []
        for c in message.get("tool_calls") or ():
            try:
                args = json.loads(c["function"].get("arguments") or "{}")
            except ValueError:
                args = {"_raw": c["function"].get("arguments")}
            calls.append(ToolCall(c["function"]["name"], args if isinstance(args, dict) else {"_value": args}))
        return get_format(self.chat.tool_format).render_calls(calls) if calls else ""

    async def complete(self, sid: str | None, body: Any, disconnected: Callable[[], Awaitable[Any]] | None = None,
                       on_token: Callable[[int], None] | None = None) -> tuple[Answer, ChatRequest]:
        """Run one call for session `sid`; `disconnected` resolves when the caller hangs up (then the call
        is dropped, unrecorded, and `ClientGone` raised; so is a call whose task is cancelled). `on_token(id)`
        hears each completion token as the engine samples it (from the engine's thread)."""
        session = self.store.get(sid, for_call=True)
        request = parse_chat_request(body, self.config.max_new_tokens)
        prompt, spliced, retokenized = self.prompt_ids(session, request)
        limit = self.config.max_context_tokens
        if limit is not None and len(prompt) + request.sampling.max_tokens > limit:
            raise GatewayError(400, f"the prompt has {len(prompt)} tokens and max_tokens is "
                               f"{request.sampling.max_tokens}: more than the {limit} this gateway serves "
                               "(--max-context-tokens)", param="messages", code="context_length_exceeded")
        future = self.engine.submit(GenerationRequest(tuple(prompt), request.sampling), on_token)
        waiter = asyncio.wrap_future(future)
        watch = asyncio.ensure_future(disconnected()) if disconnected is not None else None
        try:
            done, _ = await asyncio.wait({waiter, *([watch] if watch else [])}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # a stream's reader went away: the call is lost, as a hang-up's
            future.cancel()
            self.store.lost(session)
            raise
        finally:
            if watch is not None and not watch.done():
                watch.cancel()
        if waiter not in done or (watch is not None and watch.done() and not watch.cancelled()):
            future.cancel()   # still queued: never generated; generating: its answer is dropped
            self.store.lost(session)
            raise ClientGone()
        try:
            generation, took = waiter.result()
        except Exception as exc:
            raise GatewayError(500, f"the engine failed: {type(exc).__name__}: {exc}", "server_error",
                               code="engine_error") from exc
        if generation.finish_reason == "error":
            raise GatewayError(500, f"the engine failed: {generation.error}", "server_error", code="engine_error")
        return self._record(session, request, prompt, generation, took, spliced, retokenized), request

    def _record(self, session: Session, request: ChatRequest, prompt: list[int], generation: Any, took: float,
                spliced: int, retokenized: int) -> Answer:
        calls = []
        if request.tools and request.parse_tools:
            schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in request.tools}
            parsed = get_format(self.chat.tool_format).parse(generation.text, schemas)
            calls = parsed if parsed and all(c.error is None for c in parsed) else []
        tool_calls = tool_call_objects(calls, f"call_{secrets.token_hex(6)}")
        finish = "tool_calls" if tool_calls else generation.finish_reason
        content = None if tool_calls else generation.text
        last = request.messages[-1]
        call = Call(0, tuple(prompt), tuple(generation.token_ids), tuple(generation.logprobs), generation.text, finish,
                    len(tool_calls), spliced, retokenized, generation.policy_version or self.version, took,
                    (last["content"] or "") if last["role"] in ("user", "tool") else "")
        call = self.store.record(session, call, content or "", [c["id"] for c in tool_calls])
        self.served += 1
        logprobs = logprob_content(call.completion_ids, call.logprobs, lambda i: self.chat.decode([i])) \
            if request.logprobs else None
        return Answer(f"chatcmpl-{secrets.token_hex(12)}", self.config.model, int(time.time()), content, tool_calls,
                      finish, call.prompt_ids, call.completion_ids, logprobs, call.index)
