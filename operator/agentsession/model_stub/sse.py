"""Streams a scripted reply as server-sent events, paced like a model, ending as soon as the client hangs up.

Each API renders the same three moments of a reply (its opening, each text chunk, its close with any tool call)
in its own events; the pacing and the hang-up handling live here once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

from aiohttp import web

from agentsession.model_stub.recorder import Received
from agentsession.model_stub.script import Reply

log = logging.getLogger(__name__)

Event = tuple[str | None, dict[str, Any]]
"""An SSE `event:` name (None for APIs that send only `data:`) and its JSON data."""


class Renderer(Protocol):
    reply: Reply

    def whole(self) -> dict[str, Any]: ...

    def opening(self) -> list[Event]: ...

    def text(self, chunk: str) -> list[Event]: ...

    def closing(self) -> list[Event]: ...


def encode(event: Event) -> bytes:
    name, data = event
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def answer(
    request: web.Request, renderer: Renderer, received: Received, *, stream: bool
) -> web.StreamResponse:
    """The reply as server-sent events, or whole when the agent did not ask for a stream."""
    if stream:
        return await stream_reply(request, renderer.reply, renderer, received)
    received.outcome = "completed"
    return web.json_response(renderer.whole())


async def stream_reply(
    request: web.Request, reply: Reply, renderer: Renderer, received: Received
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "Connection": "keep-alive"}
    )
    await response.prepare(request)
    try:
        await _send(response, renderer.opening())
        for i, chunk in enumerate(reply.chunks):
            if i and reply.interval:
                await asyncio.sleep(reply.interval)
            await _send(response, renderer.text(chunk))
        await _send(response, renderer.closing())
        await response.write_eof()
    except ConnectionResetError:
        # aiohttp refuses writes once the client has closed the connection, so a hang-up ends the reply at the
        # next chunk.
        received.outcome = "disconnected"
        log.info("client went away mid-reply", extra={"endpoint": received.endpoint})
        return response
    received.outcome = "completed"
    return response


async def _send(response: web.StreamResponse, events: list[Event]) -> None:
    for event in events:
        await response.write(encode(event))
