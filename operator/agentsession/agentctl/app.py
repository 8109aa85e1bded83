"""The aiohttp application of agentctl: the handlers of every route of `agentsession.agentctl_routes`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from agentsession.agentctl import routes_acp, routes_control, routes_permissions, routes_shell, ws_streams
from agentsession.agentctl.binding import Handlers, register
from agentsession.agentctl.config import Config
from agentsession.agentctl.drain import clear_stop_files, serve_stop_requests
from agentsession.agentctl.http_common import json_ok
from agentsession.agentctl.middleware import make_middlewares
from agentsession.agentctl.openapi import build_openapi
from agentsession.agentctl.services import SERVICES, Services
from agentsession.agentctl_routes import OPENAPI


def create_app(config: Config, svc: Services | None = None) -> web.Application:
    svc = svc or Services.build(config)
    app = web.Application(
        middlewares=make_middlewares(config.token, config.max_body_bytes, svc.metrics),
        client_max_size=config.max_body_bytes,
    )
    app[SERVICES] = svc
    document = build_openapi()
    own = Handlers()

    @own(OPENAPI)
    async def openapi(request: web.Request) -> web.Response:
        return json_ok(document)

    register(
        app,
        [
            own,
            routes_control.handlers,
            routes_acp.handlers,
            routes_permissions.handlers,
            routes_shell.handlers,
            ws_streams.handlers,
        ],
    )

    fifo_dir = config.agent_fifo_dir
    if fifo_dir is not None:
        clear_stop_files(fifo_dir)

        async def stop_requests(app: web.Application) -> AsyncIterator[None]:
            svc = app[SERVICES]
            task = asyncio.create_task(
                serve_stop_requests(fifo_dir, svc.drainer, svc.bridge, config.drain_timeout),
                name="agentctl: stop requests",
            )
            yield
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        app.cleanup_ctx.append(stop_requests)

    async def on_shutdown(app: web.Application) -> None:
        await app[SERVICES].close()

    app.on_shutdown.append(on_shutdown)
    return app
