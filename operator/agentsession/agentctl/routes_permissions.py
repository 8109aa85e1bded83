"""Pending permission requests: list and answer."""

from __future__ import annotations

from aiohttp import web

from agentsession.agentctl.binding import Handlers
from agentsession.agentctl.errors import ApiError
from agentsession.agentctl.http_common import json_ok, parse_body
from agentsession.agentctl.permissions import InvalidOption, UnknownPending
from agentsession.agentctl.services import services
from agentsession.contract.routes import PERMISSION_RESPOND, PERMISSIONS
from agentsession.contract.wire import PermissionRespondBody

handlers = Handlers()


@handlers(PERMISSIONS)
async def list_pending(request: web.Request) -> web.Response:
    return json_ok({"pending": services(request).permissions.pending()})


@handlers(PERMISSION_RESPOND)
async def respond(request: web.Request) -> web.Response:
    body = await parse_body(request, PermissionRespondBody)
    try:
        outcome = services(request).permissions.respond(body.pending_id, body.option_id, body.cancelled)
    except UnknownPending as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except InvalidOption as exc:
        raise ApiError(422, "validation_error", str(exc)) from None
    return json_ok({"success": True, "pending_id": body.pending_id, "outcome": outcome})
