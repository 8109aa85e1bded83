"""Health, status, info, start/stop, history, metrics."""

from __future__ import annotations

import contextlib
import time

from aiohttp import web

from agentsession.agentctl import __version__
from agentsession.agentctl.binding import Handlers
from agentsession.agentctl.clock import utc_now
from agentsession.agentctl.errors import ApiError
from agentsession.agentctl.http_common import dumps, json_ok, parse_body, query_int
from agentsession.agentctl.metrics import CONTENT_TYPE_LATEST
from agentsession.agentctl.services import services
from agentsession.contract.routes import (
    AGENT_HEALTH,
    HEALTH,
    HISTORY,
    INFO,
    METRICS,
    OPENAPI,
    START,
    STATUS,
    STOP,
)
from agentsession.contract.wire import HISTORY_PAGE_BYTES, HISTORY_PAGE_ENTRIES, StartRequest

handlers = Handlers()

AGENT_HEALTH_WAIT_MAX = 10
WRITE_PIECE_BYTES = 64 * 1024  # a history page goes out in pieces of about this size


@handlers(HEALTH)
async def health(request: web.Request) -> web.Response:
    return json_ok({"status": "ok", "timestamp": utc_now()})


@handlers(AGENT_HEALTH)
async def agent_health(request: web.Request) -> web.Response:
    """The agent container's readiness probe. Waiting for the answer (instead of saying no at once) makes the
    probe see the agent the moment it answers, not a probe period later."""
    wait = min(query_int(request, "wait", 0) or 0, AGENT_HEALTH_WAIT_MAX)
    s = services(request)
    if not await s.agent_initialized(wait):
        raise ApiError(
            503,
            "agent_not_initialized",
            f"the agent has not answered ACP initialize yet (agent {s.agent_state()}); see GET /api/v1/status",
        )
    return json_ok({"status": "ok", "timestamp": utc_now()})


@handlers(STATUS)
async def status(request: web.Request) -> web.Response:
    s = services(request)
    return json_ok(
        {
            **s.bridge.status(),
            "pending_permissions": s.permissions.count,
            "clients": {
                "updates": s.clients.updates,
                "permissions": s.clients.permissions,
                "shell": s.clients.shell,
            },
            "last_seq": s.journal.last_seq,
            "journal_id": s.journal.id,
            "last_activity_at": s.last_activity_at(),
            "uptime_seconds": round(time.monotonic() - s.started, 3),
            "timestamp": utc_now(),
        }
    )


@handlers(INFO)
async def info(request: web.Request) -> web.Response:
    s = services(request)
    acp = s.bridge.acp
    return json_ok(
        {
            "name": "agentctl",
            "version": __version__,
            **s.bridge.transport.describe(),
            "workdir": str(s.config.workdir),
            "journal": str(s.journal.path),
            "agent_info": acp.agent_info,
            "agent_capabilities": acp.agent_capabilities,
            "protocol_version": acp.protocol_version,
            "openapi": OPENAPI.path,
        }
    )


@handlers(START)
async def start(request: web.Request) -> web.Response:
    body = await parse_body(request, StartRequest)
    resp = await services(request).bridge.start(body)
    return json_ok(resp.model_dump(mode="json"))


@handlers(STOP)
async def stop(request: web.Request) -> web.Response:
    bridge = services(request).bridge
    await bridge.stop()
    return json_ok({"success": True, "state": bridge.state})


@handlers(HISTORY)
async def history(request: web.Request) -> web.StreamResponse:
    """One page of the journal, written as it is read: the answer never holds more than a batch of entries.

    The page ends before the entry that would take it past `limit` entries or HISTORY_PAGE_BYTES, and then says
    where the next one starts (`next`); a page holds one entry at least, which always fits (ENTRY_MAX_BYTES).
    """
    s = services(request)
    after = query_int(request, "after", 0) or 0
    limit = min(query_int(request, "limit", None, minimum=1) or HISTORY_PAGE_ENTRIES, HISTORY_PAGE_ENTRIES)
    upto = s.journal.last_seq
    response = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
    await response.prepare(request)
    count = size = 0
    last, next_after = after, None
    piece = bytearray(b'{"updates":[')
    try:
        async with contextlib.aclosing(s.journal.stream(after, upto)) as entries:
            async for entry in entries:
                if count and (count == limit or size + entry.size > HISTORY_PAGE_BYTES):
                    next_after = last
                    break
                piece += (b"," if count else b"") + entry.text.encode()
                count, size, last = count + 1, size + entry.size, entry.seq
                if len(piece) >= WRITE_PIECE_BYTES:
                    await response.write(bytes(piece))
                    piece.clear()
        tail = {"last_seq": upto, "journal_id": s.journal.id, "next": next_after}
        piece += b"]," + dumps(tail)[1:].encode()
        await response.write(bytes(piece))
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left mid-page
    return response


@handlers(METRICS)
async def metrics(request: web.Request) -> web.Response:
    body = services(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
