"""WS /api/v1/acp/stream and /api/v1/acp/permissions/stream: journal entries, replayed then live.

A client that falls behind its subscription's byte budget is closed with 1013 (try again later) and the seq to
resume after, in the close reason.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from agentsession.agentctl.binding import Handlers
from agentsession.agentctl.clock import utc_now
from agentsession.agentctl.events import SubscriberTooSlow, Subscription
from agentsession.agentctl.http_common import query_int
from agentsession.agentctl.permissions import PERMISSION_KINDS
from agentsession.agentctl.services import Services, services
from agentsession.agentctl.ws_common import accept, client_frames, send, send_error
from agentsession.contract.routes import PERMISSION_STREAM, UPDATES

log = logging.getLogger(__name__)

handlers = Handlers()

WS_CLOSE_TRY_AGAIN = 1013


async def _pump(ws: web.WebSocketResponse, sub: Subscription, after: int | None) -> None:
    try:
        async for entry in sub.entries(after):
            await ws.send_str(entry.text)
    except SubscriberTooSlow as exc:
        await ws.close(code=WS_CLOSE_TRY_AGAIN, message=str(exc).encode()[:120])
    except (ConnectionError, RuntimeError):
        pass  # the client went away mid-send


async def _listen(ws: web.WebSocketResponse) -> None:
    try:
        async for frame in client_frames(ws):
            await send_error(
                ws, "unknown_type", f"unknown frame type {frame['type']!r}; this stream accepts only ping"
            )
    except (ConnectionError, RuntimeError):
        pass  # the client went away mid-send


async def _serve(
    request: web.Request, s: Services, sub: Subscription, after: int | None, ws: web.WebSocketResponse
) -> None:
    try:
        # The stream ends when either does: the client leaves or falls behind, or the hub closes.
        async with asyncio.TaskGroup() as group:
            both = {group.create_task(_pump(ws, sub, after)), group.create_task(_listen(ws))}
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            for task in both:
                task.cancel()
    finally:
        sub.close()
        await ws.close()


@handlers(UPDATES)
async def update_stream(request: web.Request) -> web.WebSocketResponse:
    s = services(request)
    after = query_int(request, "after", None)
    ws = await accept(request)
    # Subscribe before anything can await: entries published from here on reach the queue, older ones the replay.
    sub = s.hub.subscribe()
    s.clients.updates += 1
    s.metrics.stream_clients.labels("updates").inc()
    try:
        await _serve(request, s, sub, after, ws)
    finally:
        s.clients.updates -= 1
        s.metrics.stream_clients.labels("updates").dec()
    return ws


@handlers(PERMISSION_STREAM)
async def permission_stream(request: web.Request) -> web.WebSocketResponse:
    s = services(request)
    after = query_int(request, "after", None)
    ws = await accept(request)
    sub = s.hub.subscribe(PERMISSION_KINDS)
    s.clients.permissions += 1
    s.metrics.stream_clients.labels("permissions").inc()
    try:
        if after is None:
            await send(
                ws, {"kind": "pending_snapshot", "timestamp": utc_now(), "pending": s.permissions.pending()}
            )
        await _serve(request, s, sub, after, ws)
    finally:
        s.clients.permissions -= 1
        s.metrics.stream_clients.labels("permissions").dec()
    return ws
