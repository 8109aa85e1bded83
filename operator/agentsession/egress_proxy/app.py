"""The proxy's two listeners: the proxy port (model and git routes, plain HTTP through aiohttp; CONNECT through
`forward.FrontProtocol`), and the metrics port (`/metrics`, `/healthz`, `/readyz`)."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.typedefs import Handler

from agentsession.egress_proxy import forward, git_route, metrics, model_route
from agentsession.egress_proxy.state import PROXY, Proxy


@web.middleware
async def absolute_uri(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A request for an absolute URI is a forward-proxy request, whatever its path looks like."""
    if not request.raw_path.startswith("/"):
        return await forward.plain_http(request, request.app[PROXY])
    return await handler(request)


def proxy_app(proxy: Proxy) -> web.Application:
    app = web.Application(client_max_size=proxy.settings.max_request_bytes, middlewares=[absolute_uri])
    app[PROXY] = proxy
    app.add_routes([*model_route.routes(), *git_route.routes()])
    return app


def metrics_app(proxy: Proxy) -> web.Application:
    async def render(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), content_type="text/plain", charset="utf-8")

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        if proxy.directory.synced:
            return web.json_response({"status": "ready"})
        return web.json_response(
            {"status": "syncing", "reason": "the watches have not listed yet"}, status=503
        )

    app = web.Application()
    app.add_routes([web.get("/metrics", render), web.get("/healthz", healthz), web.get("/readyz", readyz)])
    return app


class Listener:
    """The proxy port: each connection starts on `FrontProtocol`, which hands it to aiohttp or a tunnel."""

    def __init__(self, proxy: Proxy) -> None:
        self._proxy = proxy
        self._runner = web.AppRunner(proxy_app(proxy), access_log=None)
        self._server: asyncio.Server | None = None
        self._tunnels: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        await self._runner.setup()
        http = self._runner.server
        assert http is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: forward.FrontProtocol(self._proxy, http, self._tunnels), host, port, reuse_address=True
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tunnels):
            task.cancel()
        await asyncio.gather(*self._tunnels, return_exceptions=True)
        await self._runner.shutdown()
        await self._runner.cleanup()
