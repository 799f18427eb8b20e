"""An OpenAI-compatible gateway that turns an outside agent's calls into trainable, token-exact episodes.

    from agentgym.train.gateway import Gateway, GatewayServer
    gateway = Gateway(policy, chat)                 # any agentgym Policy and the ChatFormat of its tokenizer
    with GatewayServer(gateway) as server:          # uvicorn on loopback, in a thread
        session = gateway.open_session(task="...")  # the harness uses base_url=server.url, api_key=session.id
        ...                                         # the harness runs unchanged against /v1/chat/completions
        gateway.close_session(session.id, reward=1.0)
        trajectory = session_trajectory(gateway.session(session.id), group_id=0, sample_index=0)

Pieces: `protocol` (the OpenAI request/response shapes, tool-schema checks, OpenAI-style errors), `sessions`
(the per-call records and their store), `merge` (calls -> segments -> a `Trajectory`, pure functions),
`engine` (batches concurrent calls into the policy's `generate`), `service` (a call end to end), `app`
(the Starlette app and the server thread), `collector` (G harness runs per task -> the trainer's batch),
`cli` (`agentgym serve gateway`). docs/guide/gateway.md is the user's page.
"""
from __future__ import annotations

from agentgym.train.gateway.merge import segments, session_trajectory
from agentgym.train.gateway.protocol import GatewayError
from agentgym.train.gateway.service import Gateway, GatewayConfig
from agentgym.train.gateway.sessions import Call, Session

__all__ = ["Call", "Gateway", "GatewayConfig", "GatewayError", "GatewayServer", "Session", "segments",
           "session_trajectory"]


def __getattr__(name: str):  # the server pulls in starlette/uvicorn: only when asked for
    if name == "GatewayServer":
        from agentgym.train.gateway.app import GatewayServer

        return GatewayServer
    raise AttributeError(name)
