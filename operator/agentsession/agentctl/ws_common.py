"""WebSocket plumbing shared by the streams: upgrade checks, a reader for client frames, error frames."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import WSMsgType, web

from agentsession.agentctl.errors import ApiError
from agentsession.agentctl.http_common import NESTED_TOO_DEEP, dumps, nested_too_deeply

HEARTBEAT_SECONDS = 30.0
MAX_CLIENT_FRAME = 1024 * 1024


async def accept(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(heartbeat=HEARTBEAT_SECONDS, max_msg_size=MAX_CLIENT_FRAME)
    if not ws.can_prepare(request).ok:
        raise ApiError(
            426,
            "upgrade_required",
            f"{request.path} is a WebSocket endpoint; connect with a WebSocket client",
        )
    await ws.prepare(request)
    return ws


async def send(ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
    await ws.send_str(dumps(frame))


async def send_error(ws: web.WebSocketResponse, code: str, message: str) -> None:
    await send(ws, {"type": "error", "error": code, "message": message})


async def client_frames(ws: web.WebSocketResponse) -> AsyncIterator[dict[str, Any]]:
    """Yield client JSON objects; answer ping and malformed frames here so each stream handles only its own."""
    async for msg in ws:
        if msg.type != WSMsgType.TEXT:
            if msg.type == WSMsgType.BINARY:
                await send_error(ws, "bad_frame", "binary frames are not accepted; send JSON text")
            continue
        try:
            data = json.loads(msg.data)
            deep = nested_too_deeply(data)
        except ValueError as exc:
            await send_error(ws, "invalid_json", f"frame is not valid JSON: {exc}")
            continue
        except RecursionError:
            deep = True
        if deep:
            await send_error(ws, "invalid_json", f"frame: {NESTED_TOO_DEEP}")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            await send_error(ws, "bad_frame", 'frames are JSON objects with a string "type"')
            continue
        if data["type"] == "ping":
            await send(ws, {"type": "pong"})
            continue
        yield data
