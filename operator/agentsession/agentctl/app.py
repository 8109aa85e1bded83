"""The aiohttp application of agentctl: the handlers of every route of `agentsession.contract.routes`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.typedefs import Handler

from agentsession.agentctl import routes_acp, routes_control, routes_permissions, routes_shell, ws_streams
from agentsession.agentctl.authentication import Verifier
from agentsession.agentctl.binding import Handlers, register
from agentsession.agentctl.config import Config
from agentsession.agentctl.drain import clear_stop_files, serve_stop_requests
from agentsession.agentctl.http_common import json_ok
from agentsession.agentctl.middleware import OPEN_PATHS, announce_instance, make_middlewares
from agentsession.agentctl.openapi import build_openapi
from agentsession.agentctl.services import SERVICES, Services, preload_acp
from agentsession.agentctl.transport_fifo import FifoTransport
from agentsession.contract.routes import OPENAPI


async def prepare_agent(svc: Services) -> None:
    """A pod's agent is running already: initialize it as soon as the ACP side is loaded
    (`bridge.lifecycle.Lifecycle.prepare`)."""
    await svc.acp_loaded()
    svc.bridge.prepare_in_background()


def create_app(config: Config, svc: Services | None = None) -> web.Application:
    svc = svc or Services.build(config)
    verifier = Verifier(config.token) if config.token is not None else None

    @web.middleware
    async def acp_loaded(request: web.Request, handler: Handler) -> web.StreamResponse:
        # Handlers reach the ACP side synchronously; until its thread has loaded it, that import would stop the
        # event loop (and the agent's pipes and every other request with it), so they wait for it here.
        if request.path not in OPEN_PATHS:
            await svc.acp_loaded()
        return await handler(request)

    app = web.Application(
        middlewares=[
            *make_middlewares(verifier, config.max_body_bytes, svc.metrics),
            acp_loaded,
        ],
        client_max_size=config.max_body_bytes,
    )
    app[SERVICES] = svc
    if verifier is not None:
        announce_instance(app, verifier)
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

    async def background(app: web.Application) -> AsyncIterator[None]:
        svc = app[SERVICES]
        svc.acp_loading = asyncio.create_task(preload_acp(), name="agentctl: load ACP")
        tasks = [svc.acp_loading]
        fifo_dir = config.agent_fifo_dir
        if fifo_dir is not None and isinstance(svc.transport, FifoTransport):
            svc.transport.open_early()
            tasks.append(asyncio.create_task(prepare_agent(svc), name="agentctl: prepare the agent"))
            clear_stop_files(fifo_dir)
            stop_requests = serve_stop_requests(
                fifo_dir, svc.drainer, lambda: svc.bridge, config.drain_timeout
            )
            tasks.append(asyncio.create_task(stop_requests, name="agentctl: stop requests"))
        yield
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.cleanup_ctx.append(background)

    async def on_shutdown(app: web.Application) -> None:
        await app[SERVICES].close()

    app.on_shutdown.append(on_shutdown)
    return app
