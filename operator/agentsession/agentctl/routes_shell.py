"""The workspace shell: status, recent output, and a WS stream for input and output."""

from __future__ import annotations

import asyncio

from aiohttp import web

from agentsession.agentctl.binding import Handlers
from agentsession.agentctl.errors import ApiError
from agentsession.agentctl.http_common import json_ok
from agentsession.agentctl.services import services
from agentsession.agentctl.shell import ShellSession
from agentsession.agentctl.ws_common import accept, client_frames, send, send_error
from agentsession.contract.routes import SHELL_BUFFER, SHELL_STATUS, SHELL_STREAM

handlers = Handlers()


async def _started(shell: ShellSession) -> None:
    try:
        await shell.ensure_started()
    except OSError as exc:
        raise ApiError(409, "shell_unavailable", f"cannot start the shell: {exc.strerror or exc}") from exc


@handlers(SHELL_STATUS)
async def shell_status(request: web.Request) -> web.Response:
    return json_ok(services(request).shell.status())


@handlers(SHELL_BUFFER)
async def shell_buffer(request: web.Request) -> web.Response:
    shell = services(request).shell
    await _started(shell)
    text = shell.buffer()
    return json_ok({"buffer": text, "running": shell.running})


async def _forward(ws: web.WebSocketResponse, queue: asyncio.Queue[str | None]) -> None:
    try:
        while True:
            data = await queue.get()
            if data is None:
                await send(ws, {"type": "exit", "code": None})
                await ws.close()
                return
            await send(ws, {"type": "output", "data": data})
    except (ConnectionError, RuntimeError):
        pass  # the client went away mid-send


async def _take_input(ws: web.WebSocketResponse, shell: ShellSession) -> None:
    async for frame in client_frames(ws):
        kind = frame["type"]
        if kind == "input":
            data = frame.get("data")
            if not isinstance(data, str):
                await send_error(ws, "bad_frame", 'input frames need a string "data"')
                continue
            await shell.write(data)
        elif kind == "resize":
            cols, rows = frame.get("cols"), frame.get("rows")
            if not (
                isinstance(cols, int) and isinstance(rows, int) and 0 < cols < 10000 and 0 < rows < 10000
            ):
                await send_error(ws, "bad_frame", 'resize frames need integer "cols" and "rows" in 1..9999')
                continue
            shell.resize(cols, rows)
        else:
            await send_error(ws, "unknown_type", f"unknown frame type {kind!r}; use input, resize or ping")


@handlers(SHELL_STREAM)
async def shell_stream(request: web.Request) -> web.WebSocketResponse:
    s = services(request)
    shell = s.shell
    await _started(shell)
    ws = await accept(request)
    queue = shell.subscribe()
    s.clients.shell += 1
    s.metrics.stream_clients.labels("shell").inc()
    try:
        async with asyncio.TaskGroup() as group:
            # Output goes on beside the input until the client leaves; the shell's exit closes the socket.
            forward = group.create_task(_forward(ws, queue))
            await _take_input(ws, shell)
            forward.cancel()
    finally:
        shell.unsubscribe(queue)
        s.clients.shell -= 1
        s.metrics.stream_clients.labels("shell").dec()
    return ws
