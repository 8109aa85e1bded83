"""The aiohttp application: `/ws` (both dialects), `/healthz`, `/readyz`, `/metrics`, `/whoami`, and the web
console's files at `/` and `/console/`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import WSMessage, WSMsgType, web

from agentsession.agentctl_client import http_connector
from agentsession.gateway import console, metrics
from agentsession.gateway.agents import AgentRegistry
from agentsession.gateway.auth import (
    DEV_IDENTITY,
    Authenticator,
    AuthError,
    Identity,
    extract_token,
)
from agentsession.gateway.codec import Codec
from agentsession.gateway.commands import Command
from agentsession.gateway.config import GatewayConfig
from agentsession.gateway.connection import Connection
from agentsession.gateway.events import ErrorCode, Failure
from agentsession.gateway.lifecycle_dialect import LifecycleCodec
from agentsession.gateway.service import Service
from agentsession.gateway.task_dialect import TaskCodec
from agentsession.gateway.watch_cache import SessionCache
from agentsession.kube.client import Kube, connect
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

DIALECTS: dict[str, type[LifecycleCodec] | type[TaskCodec]] = {
    LifecycleCodec.name: LifecycleCodec,
    TaskCodec.name: TaskCodec,
}
MAX_CLIENT_FRAME = 1024 * 1024
DEV_MODE_WARNING = (
    "INSECURE DEV MODE: authentication and authorization are OFF; every client can see and control every "
    "AgentSession. Never run this way where anyone else can connect."
)

CONFIG = web.AppKey("config", GatewayConfig)
REGISTRY = web.AppKey("registry", AgentRegistry)
SERVICE = web.AppKey("service", Service)
CACHE = web.AppKey("cache", SessionCache)
AUTH = web.AppKey("auth", Authenticator)


def choose_dialect(request: web.Request) -> str:
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    return next((p for p in offered if p in DIALECTS), LifecycleCodec.name)


def _json_error(status: int, code: str, message: str) -> web.Response:
    resp = web.json_response({"error": code, "message": message}, status=status)
    if status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="agentsession-gateway"'
    return resp


async def _admit(request: web.Request) -> tuple[Identity, set[str], set[str]] | web.Response:
    """Who the client is, the namespaces it may see and the ones the gateway serves; or the refusal to send."""
    app = request.app
    config = app[CONFIG]
    if not app[CACHE].synced:
        return _json_error(503, "not_ready", "the gateway is still loading AgentSessions; retry shortly")
    token, _ = extract_token(request)
    if config.insecure_dev_mode:
        identity = DEV_IDENTITY
    else:
        try:
            identity = await app[AUTH].authenticate(token)
        except AuthError as exc:
            return _json_error(exc.status, exc.code, exc.message)
    auth = None if config.insecure_dev_mode else app[AUTH]
    namespaces = {o["metadata"]["namespace"] for o in app[CACHE].items()} | set(config.namespaces)
    allowed = set()
    for ns in namespaces:
        if auth is None or await auth.allowed(identity, ns, "get"):
            allowed.add(ns)
    # A cluster-wide reader may see sessions in namespaces that have none yet.
    if not allowed and auth is not None and not config.namespaces and await auth.allowed(identity, "", "get"):
        allowed.add("")
    if not allowed:
        return _json_error(
            403,
            "forbidden",
            f"{identity.username} may not get agentsessions in any namespace this gateway serves",
        )
    return identity, allowed, namespaces


async def whoami(request: web.Request) -> web.Response:
    """What `/ws` would make of this request's token: the web console asks before it connects, since a browser
    cannot read why a WebSocket handshake was refused."""
    admitted = await _admit(request)
    if isinstance(admitted, web.Response):
        return admitted
    identity, allowed, _ = admitted
    return web.json_response(
        {
            "user": identity.username,
            "namespaces": sorted(ns for ns in allowed if ns),
            "insecureDevMode": identity.anonymous_dev,
        },
        headers={"Cache-Control": "no-store"},
    )


async def ws_handler(request: web.Request) -> web.StreamResponse:
    app = request.app
    config = app[CONFIG]
    registry = app[REGISTRY]
    admitted = await _admit(request)
    if isinstance(admitted, web.Response):
        return admitted
    identity, _, namespaces = admitted
    dialect = choose_dialect(request)
    offered = request.headers.get("Sec-WebSocket-Protocol", "")
    ws = web.WebSocketResponse(
        protocols=(dialect,) if dialect in offered else (), heartbeat=30.0, max_msg_size=MAX_CLIENT_FRAME
    )
    if not ws.can_prepare(request).ok:
        return _json_error(426, "upgrade_required", "/ws is a WebSocket endpoint")
    await ws.prepare(request)
    codec: Codec = DIALECTS[dialect]()
    conn = Connection(
        ws, codec, identity, None if config.insecure_dev_mode else app[AUTH], queue_size=config.queue_size,
        queue_bytes=config.queue_bytes, request_bytes=config.max_request_bytes_in_flight,
    )  # fmt: skip
    metrics.CONNECTIONS.labels(dialect).inc()
    conn.start()
    try:
        allowed = {ns for ns in namespaces if await conn.authorize_namespace(ns)}
        # Registered before the snapshot is taken, so no change falls between the snapshot and the stream.
        registry.subscribers.add(conn)

        def visible(ns: str) -> bool:
            return ns in allowed

        hello = codec.hello(registry.infos(visible), registry.cluster_states(visible))
        if hello is not None:
            conn.send_frame(hello, label="hello")
        await _serve(conn, app[SERVICE], config.max_requests_in_flight)
    finally:
        registry.forget(conn)
        await conn.close()
        metrics.CONNECTIONS.labels(dialect).dec()
    return ws


async def _serve(conn: Connection, service: Service, max_in_flight: int) -> None:
    requests = Supervisor("gateway request", log)
    try:
        async for msg in conn.ws:
            if msg.type == WSMsgType.ERROR:
                break
            # A client being dropped is still read (and ignored) until its close: closing a socket with input
            # unread resets it, and the client would lose the error and the close code still queued for it.
            if not conn.closed:
                _take(conn, service, requests, msg, max_in_flight)
            # Frames already received are read without a pause: give the requests and the client's writer a turn
            # after each, so a burst neither counts quick requests as in flight nor outruns the writer.
            await asyncio.sleep(0)
    finally:
        await requests.close()


def _take(
    conn: Connection, service: Service, requests: Supervisor, msg: WSMessage, max_in_flight: int
) -> None:
    """One client frame: a request started, or a typed error for the client."""
    if msg.type == WSMsgType.BINARY:
        conn.deliver(Failure(ErrorCode.BAD_REQUEST, "binary frames are not accepted; send JSON text"))
        return
    if msg.type != WSMsgType.TEXT:
        return
    decoded = conn.codec.decode(msg.data)
    if isinstance(decoded, Failure):
        metrics.MESSAGES.labels("in", "malformed").inc()
        conn.deliver(decoded)
    elif len(requests) >= max_in_flight:
        metrics.MESSAGES.labels("in", "refused").inc()
        conn.deliver(_too_many(decoded, max_in_flight))
    elif (refused := conn.reserve(decoded, len(msg.data))) is not None:
        metrics.MESSAGES.labels("in", "refused").inc()
        conn.deliver(refused)
    else:
        # Requests run concurrently: a slow initialize must not hold up a ping or a prompt.
        requests.spawn(conn.answer(len(msg.data), lambda: service.handle(conn, decoded)), decoded.action)


def _too_many(cmd: Command, limit: int) -> Failure:
    message = (
        f"this connection already has {limit} requests waiting for their answers; "
        "wait for some of them before sending more"
    )
    return Failure(ErrorCode.TOO_MANY_REQUESTS, message, cmd.action, cmd.request_id, cmd.envelope_id)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    cache = request.app[CACHE]
    if cache.synced:
        return web.json_response({"status": "ok", "sessions": len(cache.items())})
    return web.json_response({"status": "syncing"}, status=503)


async def metrics_handler(request: web.Request) -> web.Response:
    return web.Response(
        body=metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )


async def _dev_mode_nagger(interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        log.warning(DEV_MODE_WARNING)


def build_app(config: GatewayConfig, kube: Kube | None = None) -> web.Application:
    app = web.Application()
    app[CONFIG] = config
    app.router.add_get("/ws", ws_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/whoami", whoami)
    console.add_routes(app)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        client = kube or await connect(config.kubeconfig)
        # Every ready agent keeps an update stream open on this session: aiohttp's default cap of 100
        # connections would leave the 101st agent unfollowed and every later call to an agentctl waiting.
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        cache = SessionCache(
            client,
            config.namespaces,
            inactivity_timeout=config.watch_inactivity_timeout,
            server_timeout=config.watch_server_timeout,
        )
        registry = AgentRegistry(
            cache,
            client,
            http_connector(http),
            agentctl_host_override=config.agentctl_host_override,
            agentctl_port_override=config.agentctl_port_override,
            init_timeout=config.init_timeout,
            shell_input_bytes=config.shell_input_max_bytes,
            shell_queue_bytes=config.shell_input_queue_bytes,
        )
        app[CACHE] = cache
        app[REGISTRY] = registry
        app[SERVICE] = Service(registry)
        app[AUTH] = Authenticator(
            client,
            audiences=config.token_audiences,
            ttl=config.auth_cache_ttl,
            max_entries=config.auth_cache_size,
        )
        background = Supervisor("gateway", log)
        if config.insecure_dev_mode:
            log.warning(DEV_MODE_WARNING)
            background.spawn(_dev_mode_nagger(config.dev_warning_interval), "insecure dev mode warning")
        cache.start()
        yield
        await background.close()
        await cache.stop()
        await registry.close()
        await http.close()
        await client.close()

    app.cleanup_ctx.append(lifecycle)
    return app


async def close_all(app: web.Application) -> None:
    with contextlib.suppress(KeyError):
        for sub in list(app[REGISTRY].subscribers):
            if isinstance(sub, Connection):
                await sub.ws.close()


def describe(app: web.Application) -> dict[str, Any]:
    return {"sessions": len(app[CACHE].items()), "clients": len(app[REGISTRY].subscribers)}
