"""ACP operations proxied to the agent; answers are the ACP result objects (camelCase, as the agent sent)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from agentsession.agentctl.binding import Handlers
from agentsession.agentctl.http_common import json_ok, parse_body
from agentsession.agentctl.services import services
from agentsession.contract.routes import CANCEL, DRAIN, INITIALIZE, MODE, PROMPT, SESSION_LOAD, SESSION_NEW
from agentsession.contract.wire import (
    CancelBody,
    DrainBody,
    InitializeBody,
    ModeBody,
    PromptBody,
    SessionLoadBody,
    SessionNewBody,
)

handlers = Handlers()


@handlers(INITIALIZE)
async def initialize(request: web.Request) -> web.Response:
    body = await parse_body(request, InitializeBody)
    return json_ok(await services(request).bridge.initialize(body.protocol_version))


@handlers(SESSION_NEW)
async def session_new(request: web.Request) -> web.Response:
    body = await parse_body(request, SessionNewBody)
    return json_ok(await services(request).bridge.new_session(body.cwd))


@handlers(SESSION_LOAD)
async def session_load(request: web.Request) -> web.Response:
    body = await parse_body(request, SessionLoadBody)
    result = await services(request).bridge.load_session(body.session_id, body.cwd)
    return json_ok({"sessionId": body.session_id, **result})


@handlers(PROMPT)
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


@handlers(CANCEL)
async def cancel(request: web.Request) -> web.Response:
    body = await parse_body(request, CancelBody)
    running = await services(request).bridge.cancel(body.session_id)
    return json_ok({"success": True, "turn_running": running})


@handlers(DRAIN)
async def drain(request: web.Request) -> web.Response:
    body = await parse_body(request, DrainBody)
    result = await services(request).drainer.drain(body.timeout_seconds)
    return json_ok(result.model_dump(mode="json"))


@handlers(MODE)
async def mode(request: web.Request) -> web.Response:
    body = await parse_body(request, ModeBody)
    current = await services(request).bridge.set_mode(body.mode_id, body.session_id)
    return json_ok({"success": True, "current_mode_id": current})
