"""The aiohttp application of agentctl."""

from __future__ import annotations

from aiohttp import web

from agentsession.agentctl import routes_acp, routes_control, routes_permissions, routes_shell, ws_streams
from agentsession.agentctl.config import Config
from agentsession.agentctl.http_common import json_ok
from agentsession.agentctl.middleware import make_middlewares
from agentsession.agentctl.openapi import build_openapi
from agentsession.agentctl.services import SERVICES, Services


def create_app(config: Config, svc: Services | None = None) -> web.Application:
    svc = svc or Services.build(config)
    app = web.Application(
        middlewares=make_middlewares(config.token, config.max_body_bytes, svc.metrics),
        client_max_size=config.max_body_bytes,
    )
    app[SERVICES] = svc
    document = build_openapi()

    async def openapi(request: web.Request) -> web.Response:
        return json_ok(document)

    app.router.add_get("/api/v1/openapi.json", openapi)
    for table in (
        routes_control.routes,
        routes_acp.routes,
        routes_permissions.routes,
        routes_shell.routes,
        ws_streams.routes,
    ):
        app.add_routes(table)

    async def on_shutdown(app: web.Application) -> None:
        await app[SERVICES].close()

    app.on_shutdown.append(on_shutdown)
    return app
