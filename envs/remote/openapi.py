"""The OpenAPI 3.0 schema an env server publishes at GET /openapi.json (the conformance test checks the
server against it). Session operations are linked from POST /sessions, so stateful clients can follow them."""
from __future__ import annotations

from typing import Any

_SID = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"}}
_ANY: dict[str, Any] = {}   # an encoded value (envs/remote/wire.py): any JSON
_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["type", "message"],
    "properties": {"type": {"type": "string"}, "message": {"type": "string"}, "exception": {"type": "string"},
                   "allow": {"type": "string"}}}}}
_INFO = {"type": "object", "description": "the step's info; tuples, sets, bytes and tool results are tagged "
         "objects (envs/remote/wire.py) so anchors decode to equal hashable values",
         "properties": {"success": {"type": "boolean"}, "valid_action": {"type": "boolean"}, "anchor": _ANY,
                        "reward_components": {"type": "object", "additionalProperties": {"type": "number"}}}}
_DESCRIBE = {"instructions": {"type": "string"}, "tools": {"type": "array", "items": {"type": "object"}},
             "max_turns": {"type": "integer", "nullable": True}, "snapshot": {"type": "boolean"}}
_ERRORS = {"400": "bad request: the message says what to send", "404": "no such session (closed or reaped)",
           "403": "a snapshot this server did not sign (never restored)", "405": "wrong method", "409": "the session is answering an earlier request, or has not been reset yet",
           "413": "body larger than the server's max_body_bytes", "500": "the env raised: its message",
           "501": "the env does not support snapshots", "503": "too many sessions, or every env slot busy"}


def _obj(properties: dict[str, Any], required: list[str] | None = None, extra: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": extra}
    if required:
        schema["required"] = required
    return schema


def _op(summary: str, ok: dict[str, Any], body: dict[str, Any] | None = None, session: bool = True,
        errors: tuple[str, ...] = ("400", "404", "405", "409", "413", "500", "503"),
        links: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {
        "200": {"description": "ok", "content": {"application/json": {"schema": ok}}},
        **{code: {"description": _ERRORS[code], "content": {"application/json": {"schema": _ERROR}}}
           for code in errors}}}
    if links:
        op["responses"]["200"]["links"] = links
    if session:
        op["parameters"] = [_SID]
    if body is not None:
        op["requestBody"] = {"required": bool(body.get("required")),
                             "content": {"application/json": {"schema": body}}}
    return op


def _links() -> dict[str, Any]:
    sid = {"session_id": "$response.body#/session_id"}
    return {name.capitalize(): {"operationId": f"{name}Session", "parameters": sid}
            for name in ("reset", "step", "snapshot", "render", "oracle", "close")}


def openapi_schema(env_id: str) -> dict[str, Any]:
    step_ok = _obj({"observation": {"type": "string"}, "reward": {"type": "number"}, "terminated": {"type": "boolean"},
                    "truncated": {"type": "boolean"}, "info": _INFO},
                   ["observation", "reward", "terminated", "truncated", "info"])
    paths = {
        "/health": {"get": _op("liveness and load", _obj(
            {"status": {"type": "string", "enum": ["ok", "closing"]}, "env_id": {"type": "string"},
             "sessions": {"type": "integer"}, "busy_sessions": {"type": "integer"},
             "max_sessions": {"type": "integer"}, "uptime_s": {"type": "number"}, "protocol": {"type": "integer"}},
            ["status", "env_id", "sessions"]), session=False, errors=())},
        "/spec": {"get": _op("the served env id, its kwargs and the server's limits", _obj(
            {"env_id": {"type": "string"}, "kwargs": _ANY, "protocol": {"type": "integer"},
             "limits": {"type": "object"}}, ["env_id", "protocol"]), session=False, errors=())},
        "/sessions": {"post": {**_op("open a session: a fresh env instance", _obj(
            {"session_id": {"type": "string"}, "env_id": {"type": "string"}, **_DESCRIBE}, ["session_id"]),
            body=_obj({}), session=False, errors=("400", "413", "500", "503"), links=_links()),
            "operationId": "createSession"}},
        "/sessions/{session_id}": {"delete": {**_op("close the session", _obj({"closed": {"type": "boolean"}}),
                                                    errors=("404", "500")), "operationId": "closeSession"}},
        "/sessions/{session_id}/reset": {"post": {**_op("reset(seed, options)", _obj(
            {"observation": {"type": "string"}, "info": _INFO, **_DESCRIBE}, ["observation", "info"]),
            body=_obj({"seed": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1, "nullable": True},
                       "options": {"type": "object", "nullable": True}}, extra=True)), "operationId": "resetSession"}},
        "/sessions/{session_id}/step": {"post": {**_op("step(action): any string is a legal action", step_ok,
                                                       body=_obj({"action": {"type": "string"}}, ["action"], extra=True)),
                                                 "operationId": "stepSession"}},
        "/sessions/{session_id}/snapshot": {"post": {**_op("the env's state, signed by this server", _obj(
            {"snapshot": {"type": "string", "format": "byte"}, "bytes": {"type": "integer"}}, ["snapshot"]),
            errors=("404", "409", "500", "501", "503")), "operationId": "snapshotSession"}},
        "/sessions/{session_id}/restore": {"post": {**_op("go back to a snapshot this server made", _obj(
            {"restored": {"type": "boolean"}}), body=_obj({"snapshot": {"type": "string"}}, ["snapshot"], extra=True),
            errors=("400", "403", "404", "409", "413", "500", "501", "503")), "operationId": "restoreSession"}},
        "/sessions/{session_id}/render": {"get": {**_op("render() text for a person", _obj(
            {"text": {"type": "string", "nullable": True}}), errors=("404", "409", "500", "503")),
            "operationId": "renderSession"}},
        "/sessions/{session_id}/oracle": {"get": {**_op("oracle_action(), where the env knows one", _obj(
            {"action": {"type": "string", "nullable": True}}), errors=("404", "409", "500", "503")),
            "operationId": "oracleSession"}},
    }
    return {"openapi": "3.0.3", "info": {"title": f"agentgym env server: {env_id}", "version": "1"},
            "paths": paths}
