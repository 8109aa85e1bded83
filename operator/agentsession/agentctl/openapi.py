"""The OpenAPI 3.1 document of agentctl's API, built from the same pydantic models the handlers use."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentsession.agentctl import __version__
from agentsession.agentctl_api import (
    CancelBody,
    ErrorResponse,
    HistoryResponse,
    InitializeBody,
    JournalEntry,
    ModeBody,
    PermissionRespondBody,
    PromptBody,
    PromptResult,
    SessionLoadBody,
    SessionNewBody,
    StartRequest,
    StartResponse,
)

REF = "#/components/schemas/{model}"

_MODELS: list[type[BaseModel]] = [
    StartRequest,
    StartResponse,
    ErrorResponse,
    InitializeBody,
    SessionNewBody,
    SessionLoadBody,
    PromptBody,
    PromptResult,
    CancelBody,
    ModeBody,
    PermissionRespondBody,
    JournalEntry,
    HistoryResponse,
]

_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": REF.format(model=model.__name__)}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(
    summary: str,
    body: type[BaseModel] | None = None,
    ok: dict[str, Any] | None = None,
    *,
    auth: bool = True,
    params: list[dict[str, Any]] | None = None,
    websocket: bool = False,
    extra: dict[int, str] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {}}
    if websocket:
        op["description"] = "WebSocket endpoint (HTTP Upgrade); a plain GET answers 426."
        op["responses"]["101"] = {"description": "Switching to the WebSocket protocol"}
        op["responses"]["426"] = _json(_ref(ErrorResponse), "Not a WebSocket upgrade")
    else:
        op["responses"]["200"] = _json(ok or _OBJECT)
    if body is not None:
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": _ref(body)}}}
        op["responses"]["400"] = _json(_ref(ErrorResponse), "Malformed JSON")
        op["responses"]["413"] = _json(_ref(ErrorResponse), "Body over the size limit")
        op["responses"]["422"] = _json(_ref(ErrorResponse), "Body does not match the schema")
    if params:
        op["parameters"] = params
        op["responses"].setdefault("400", _json(_ref(ErrorResponse), "Bad query parameter"))
    if auth:
        op["responses"]["401"] = _json(_ref(ErrorResponse), "Missing or wrong bearer token")
    else:
        op["security"] = []
    for status, text in (extra or {}).items():
        op["responses"][str(status)] = _json(_ref(ErrorResponse), text)
    return op


_AFTER = {
    "name": "after",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 0},
    "description": "Replay journal entries with seq > after first.",
}
_AGENT_ERRORS = {409: "Agent not attached or no session", 502: "Agent failed", 504: "Agent did not answer"}


def build_openapi() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in _MODELS:
        schema = model.model_json_schema(ref_template=REF, by_alias=True)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    status_ok = _json({"type": "object", "required": ["state", "acp"], "additionalProperties": True})
    paths: dict[str, Any] = {
        "/health": {"get": _op("Liveness/readiness of agentctl itself", auth=False)},
        "/api/v1/status": {
            "get": _op(
                "Agent process state, ACP state, attached clients",
                ok=status_ok["content"]["application/json"]["schema"],
            )
        },
        "/api/v1/info": {"get": _op("agentctl and agent identity")},
        "/api/v1/start": {
            "post": _op(
                "Attach, initialize, then session/load (resume) or session/new (+ initial prompt); idempotent",
                StartRequest,
                _ref(StartResponse),
                extra={**_AGENT_ERRORS, 503: "Agent did not connect in time"},
            )
        },
        "/api/v1/stop": {"post": _op("Stop the agent")},
        "/api/v1/acp/initialize": {
            "post": _op(
                "ACP initialize", InitializeBody, extra={**_AGENT_ERRORS, 503: "Agent did not connect"}
            )
        },
        "/api/v1/acp/session/new": {"post": _op("ACP session/new", SessionNewBody, extra=_AGENT_ERRORS)},
        "/api/v1/acp/session/load": {
            "post": _op(
                "ACP session/load",
                SessionLoadBody,
                extra={**_AGENT_ERRORS, 404: "Unknown session", 501: "Agent cannot load sessions"},
            )
        },
        "/api/v1/acp/prompt": {
            "post": _op(
                "ACP session/prompt; answers with the stop reason when the turn ends (?wait=false: 202 at once)",
                PromptBody,
                _ref(PromptResult),
                params=[{"name": "wait", "in": "query", "required": False, "schema": {"type": "boolean"}}],
                extra={**_AGENT_ERRORS, 404: "Not the current session"},
            )
        },
        "/api/v1/acp/cancel": {
            "post": _op(
                "ACP session/cancel", CancelBody, extra={**_AGENT_ERRORS, 404: "Not the current session"}
            )
        },
        "/api/v1/acp/mode": {
            "post": _op(
                "ACP session/set_mode, or session/set_config_option when the agent offers its modes as a config"
                " option of category mode",
                ModeBody,
                extra={**_AGENT_ERRORS, 404: "Not the current session"},
            )
        },
        "/api/v1/acp/stream": {
            "get": _op("Session updates: one JournalEntry per frame", params=[_AFTER], websocket=True)
        },
        "/api/v1/acp/permissions": {"get": _op("Pending permission requests")},
        "/api/v1/acp/permissions/stream": {
            "get": _op("Permission requests and resolutions", params=[_AFTER], websocket=True)
        },
        "/api/v1/acp/permissions/respond": {
            "post": _op(
                "Answer a pending permission request",
                PermissionRespondBody,
                extra={404: "Unknown pending id"},
            )
        },
        "/api/v1/shell/status": {"get": _op("Workspace shell state")},
        "/api/v1/shell/buffer": {
            "get": _op("Last 16 KiB of shell output", extra={409: "Shell cannot start"})
        },
        "/api/v1/shell/stream": {"get": _op("Shell input/output", websocket=True)},
        "/api/v1/history": {
            "get": _op(
                "Journal entries in order",
                ok=_ref(HistoryResponse),
                params=[
                    _AFTER,
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1},
                    },
                ],
            )
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {
                    "200": {
                        "description": "Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": _json(_ref(ErrorResponse), "Missing or wrong bearer token"),
                },
            }
        },
        "/api/v1/openapi.json": {"get": _op("This document")},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentctl",
            "version": __version__,
            "description": "Control plane sidecar of one ACP agent.",
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
