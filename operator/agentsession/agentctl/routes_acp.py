"""ACP operations proxied to the agent; answers are the ACP result objects (camelCase, as the agent sent)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from agentsession.agentctl.http_common import json_ok, parse_body
from agentsession.agentctl.services import services
from agentsession.agentctl_api import (
    CancelBody,
    InitializeBody,
    ModeBody,
    PromptBody,
    SessionLoadBody,
    SessionNewBody,
)

routes = web.RouteTableDef()


@routes.post("/api/v1/acp/initialize")
async def initialize(request: web.Request) -> web.Response:
    body = await parse_body(request, InitializeBody)
    return json_ok(await services(request).bridge.initialize(body.protocol_version))


@routes.post("/api/v1/acp/session/new")
async def session_new(request: web.Request) -> web.Response:
    body = await parse_body(request, SessionNewBody)
    return json_ok(await services(request).bridge.new_session(body.cwd))


@routes.post("/api/v1/acp/session/load")
async def session_load(request: web.Request) -> web.Response:
    body = await parse_body(request, SessionLoadBody)
    result = await services(request).bridge.load_session(body.session_id, body.cwd)
    return json_ok({"sessionId": body.session_id, **result})


@routes.post("/api/v1/acp/prompt")
async def prompt(request: web.Request) -> web.Response:
    body = await parse_body(request, PromptBody)
    wait = request.query.get("wait", "true").lower() not in ("false", "0", "no")
    bridge = services(request).bridge
    turn = bridge.begin_turn(body.prompt, body.session_id)
    if not wait:
        return json_ok({"accepted": True, "sessionId": bridge.acp.session_id}, status=202)
    # Shielded: a caller that hangs up does not cancel the agent's turn.
    stop_reason = await asyncio.shield(turn)
    return json_ok({"stopReason": stop_reason})


@routes.post("/api/v1/acp/cancel")
async def cancel(request: web.Request) -> web.Response:
    body = await parse_body(request, CancelBody)
    running = await services(request).bridge.cancel(body.session_id)
    return json_ok({"success": True, "turn_running": running})


@routes.post("/api/v1/acp/mode")
async def mode(request: web.Request) -> web.Response:
    body = await parse_body(request, ModeBody)
    current = await services(request).bridge.set_mode(body.mode_id, body.session_id)
    return json_ok({"success": True, "current_mode_id": current})
