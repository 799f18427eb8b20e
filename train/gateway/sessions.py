"""What the gateway keeps per session: every call's exact token ids and sampler log-probs, rewards, status.

A session is opened by whoever runs the harness (the collector, or a user through POST /v1/sessions); the
harness names it on each call by its API key (`api_key=session.id`) or the `X-Session-Id` header. A call is
recorded only once its answer is ready and its caller still waits for it: a harness that hangs up mid-call
loses that call and nothing else.

The store is shared by the HTTP handlers (on uvicorn's event loop) and the trainer's threads, so every
mutation happens under one lock; the records themselves are frozen.
"""
from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from agentgym.train.gateway.protocol import GatewayError


@dataclass(frozen=True)
class Call:
    """One chat completion as the engine saw it: the prompt ids it was given, the ids it sampled and their
    log-probs (both from the engine, never re-tokenised), and how the prompt was built."""

    index: int                      # the session's count of recorded calls before this one
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str                       # the completion's text as the engine decoded it
    finish_reason: str              # stop | length | tool_calls
    tool_calls: int = 0
    spliced: int = 0                # assistant messages in the prompt whose ids came from recorded completions
    retokenized: int = 0            # assistant messages that matched none, so their text was tokenised
    policy_version: int = 0
    generate_s: float = 0.0
    observation: str = ""           # the request's last message when a user or tool message: what the call answers


@dataclass
class Session:
    """One harness run. `completions` maps what the harness will send back (an assistant message's text, or a
    tool call's id) to the completion ids, so the next prompt splices the generated ids in."""

    id: str
    task: Any = None
    group: int = 0
    sample: int = 0
    status: str = "open"            # open | closed
    calls: list[Call] = field(default_factory=list)
    call_rewards: dict[int, float] = field(default_factory=dict)
    reward: float | None = None
    success: bool | None = None
    error: str | None = None        # the harness failed: the session says nothing about the agent
    lost_calls: int = 0             # calls whose caller hung up before the answer
    created: float = field(default_factory=time.monotonic)
    closed_at: float | None = None
    completions_by_text: dict[str, tuple[int, ...]] = field(default_factory=dict)
    completions_by_tool_call: dict[str, tuple[int, ...]] = field(default_factory=dict)


class SessionStore:
    """Open and closed sessions; at most `max_open` open at once (more are refused: the bound on concurrent
    sessions). Closed sessions stay until `pop`ped by whoever trains on them (or `keep_closed` is exceeded)."""

    def __init__(self, max_open: int = 256, keep_closed: int = 4096):
        self.max_open, self.keep_closed = max_open, keep_closed
        self.lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def open(self, task: Any = None, group: int = 0, sample: int = 0, session_id: str | None = None) -> Session:
        with self.lock:
            if sum(s.status == "open" for s in self._sessions.values()) >= self.max_open:
                raise GatewayError(429, f"{self.max_open} sessions are open already (--max-sessions); close one "
                                   "first", "rate_limit_error", code="too_many_sessions")
            sid = session_id or "gw-" + secrets.token_hex(12)
            if sid in self._sessions:
                raise GatewayError(409, f"session {sid!r} exists already", code="session_exists", param="id")
            session = Session(sid, task, group, sample)
            self._sessions[sid] = session
            self._forget_old_closed()
            return session

    def _forget_old_closed(self) -> None:
        closed = [s for s in self._sessions.values() if s.status == "closed"]
        for s in sorted(closed, key=lambda s: s.closed_at or 0.0)[:max(0, len(closed) - self.keep_closed)]:
            del self._sessions[s.id]

    def get(self, sid: str | None, for_call: bool = False) -> Session:
        """The session `sid`; an unknown one is a 401 (OpenAI's answer to an unknown API key), and a closed
        one taking a call a 409."""
        with self.lock:
            session = self._sessions.get(sid or "")
        if session is None:
            shown = "none given" if not sid else repr(sid if len(sid) <= 40 else sid[:40] + "...")
            raise GatewayError(401, f"unknown session ({shown}): open one with POST /v1/sessions and pass its id as "
                               "the API key or the X-Session-Id header", "authentication_error", code="unknown_session")
        if for_call and session.status != "open":
            raise GatewayError(409, f"session {session.id} is closed; calls after close are refused (open a new "
                               "session for a new run)", code="session_closed")
        return session

    def record(self, session: Session, call: Call, returned_text: str, tool_call_ids: list[str]) -> Call:
        """Append `call` (re-indexed in completion order) and remember how the harness will refer to it."""
        with self.lock:
            if session.status != "open":  # closed while the call ran: the answer is refused, not recorded
                raise GatewayError(409, f"session {session.id} was closed while this call ran", code="session_closed")
            call = replace(call, index=len(session.calls))
            session.calls.append(call)
            session.completions_by_text[returned_text] = call.completion_ids
            for tid in tool_call_ids:
                session.completions_by_tool_call[tid] = call.completion_ids
            return call

    def lost(self, session: Session) -> None:
        with self.lock:
            session.lost_calls += 1

    def reward(self, sid: str, reward: float, call: int | None = None, success: bool | None = None) -> Session:
        """Set the session's reward (replacing an earlier one) or add to one call's; allowed until popped."""
        session = self.get(sid)
        with self.lock:
            if call is None:
                session.reward = reward
            elif not -len(session.calls) <= call < len(session.calls):
                raise GatewayError(400, f"session {sid} has {len(session.calls)} recorded calls; call {call} is not "
                                   "one of them (0-based, negative counts from the end)", param="call",
                                   code="unknown_call")
            else:
                index = call % len(session.calls)
                session.call_rewards[index] = session.call_rewards.get(index, 0.0) + reward
            if success is not None:
                session.success = success
            return session

    def close(self, sid: str, reward: float | None = None, success: bool | None = None,
              error: str | None = None) -> Session:
        session = self.get(sid)
        with self.lock:
            if session.status == "closed":
                raise GatewayError(409, f"session {sid} is closed already", code="session_closed")
            session.status, session.closed_at = "closed", time.monotonic()
            if reward is not None:
                session.reward = reward
            if success is not None:
                session.success = success
            if error is not None:
                session.error = error
            return session

    def pop(self, sid: str) -> Session:
        with self.lock:
            session = self._sessions.pop(sid, None)
        if session is None:
            raise GatewayError(401, f"unknown session {sid!r}", "authentication_error", code="unknown_session")
        return session

    def counts(self) -> dict[str, int]:
        with self.lock:
            statuses = [s.status for s in self._sessions.values()]
        return {"open": statuses.count("open"), "closed": statuses.count("closed")}
