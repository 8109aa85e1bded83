"""The aiohttp application: `/ws` (both dialects), `/healthz`, `/readyz`, `/whoami`, and the web console's files
at `/` and `/console/`; and, on a port of its own (`serve_metrics`), `/metrics` with the probes again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import WSMessage, WSMsgType, web

from agentsession.agentctl_client import http_connector
from agentsession.contract.auth import ReleaseKeyError, TokenDeriver, read_key
from agentsession.gateway import console, metrics
from agentsession.gateway.access_guard import guard
from agentsession.gateway.agents import AgentRegistry
from agentsession.gateway.auth import (
    DEV_IDENTITY,
    Authenticator,
    AuthError,
    FailureLimiter,
    Identity,
    extract_token,
)
from agentsession.gateway.codec import Codec
from agentsession.gateway.commands import Command
from agentsession.gateway.config import GatewayConfig
from agentsession.gateway.connection import CLOSE_TOO_MANY_CONNECTIONS, Connection
from agentsession.gateway.events import ErrorCode, Failure
from agentsession.gateway.lifecycle_dialect import LifecycleCodec
from agentsession.gateway.origin import loopback_host, origin_allowed
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
ORIGINS = web.AppKey("origins", frozenset[str])
USERS = web.AppKey("users", Counter[str])  # open connections per user


def choose_dialect(request: web.Request) -> str:
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    return next((p for p in offered if p in DIALECTS), LifecycleCodec.name)


def _json_error(status: int, code: str, message: str, retry_after: float | None = None) -> web.Response:
    resp = web.json_response({"error": code, "message": message}, status=status)
    if status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="agentsession-gateway"'
    if retry_after is not None:
        resp.headers["Retry-After"] = str(max(1, round(retry_after)))
    return resp


@web.middleware
async def loopback_hosts_only(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Dev mode's guard against DNS rebinding: a page whose name now resolves to loopback still names itself."""
    if not loopback_host(request.headers.get("Host")):
        return _json_error(
            403,
            "forbidden_host",
            "this gateway runs without authentication and answers only requests for 127.0.0.1, ::1 or localhost",
        )
    return await handler(request)


async def _admit(
    request: web.Request, token: str | None
) -> tuple[Identity, set[str], set[str]] | web.Response:
    """Who the client is, the namespaces it may see and the ones the gateway serves; or the refusal to send."""
    app = request.app
    config = app[CONFIG]
    if not app[CACHE].synced:
        return _json_error(503, "not_ready", "the gateway is still loading AgentSessions; retry shortly")
    if config.insecure_dev_mode:
        identity = DEV_IDENTITY
    else:
        try:
            identity = await app[AUTH].authenticate(token, request.remote or "unknown")
        except AuthError as exc:
            return _json_error(exc.status, exc.code, exc.message, exc.retry_after)
    auth = None if config.insecure_dev_mode else app[AUTH]
    namespaces = app[CACHE].namespaces() | set(config.namespaces)
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
    admitted = await _admit(request, extract_token(request)[0])
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
    origin = request.headers.get("Origin")
    if not origin_allowed(origin, request.headers.get("Host"), app[ORIGINS]):
        metrics.AUTH_DECISIONS.labels("forbidden_origin").inc()
        return _json_error(
            403,
            "forbidden_origin",
            f"pages from {origin} may not open this gateway's WebSocket; "
            "its operator can allow them with --allowed-origins",
        )
    token, _ = extract_token(request)
    admitted = await _admit(request, token)
    if isinstance(admitted, web.Response):
        return admitted
    identity, allowed, namespaces = admitted
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
    users = app[USERS]
    # Dev mode has one identity for everyone: no bound per user. Checked and counted with no await between, so
    # concurrent handshakes of one user cannot all pass.
    limited = not config.insecure_dev_mode
    over = limited and users[identity.username] >= config.max_connections_per_user
    counted = limited and not over
    if counted:
        users[identity.username] += 1
    try:
        if over:
            # Nothing else reads this socket: the close below waits for the client's answer to the close frame,
            # reading (and dropping) whatever it sent first, so the client gets the error and the code.
            conn.shut(_too_many_connections(config.max_connections_per_user), CLOSE_TOO_MANY_CONNECTIONS,
                      "too many connections")  # fmt: skip
            return ws
        if token is not None and limited:
            shells = registry.shells.of
            conn.spawn(
                guard(conn, app[AUTH], token, config.auth_recheck_interval, lambda: shells(conn)), "guard"
            )
        # What admission asked is this connection's answer: not asked again.
        conn.admitted({ns: ns in allowed for ns in namespaces})
        # Registered before the snapshot is taken, so no change falls between the snapshot and the stream.
        registry.subscribers.add(conn)
        hello = codec.hello(*registry.snapshot(allowed & namespaces))
        if hello is not None:
            conn.send_frame(hello, label="hello")
        await _serve(conn, app[SERVICE], config.max_requests_in_flight)
    finally:
        if counted:
            users[identity.username] -= 1
            if not users[identity.username]:
                del users[identity.username]
        registry.forget(conn)
        await conn.close()
        metrics.CONNECTIONS.labels(dialect).dec()
    return ws


def _too_many_connections(limit: int) -> Failure:
    metrics.AUTH_DECISIONS.labels("too_many_connections").inc()
    return Failure(
        ErrorCode.TOO_MANY_CONNECTIONS,
        f"you already have {limit} connections open to this gateway, the most one user may have; close one first",
    )


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
        return web.json_response({"status": "ok", "sessions": len(cache.sessions())})
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
    if config.agentctl_key_file is None:
        raise ReleaseKeyError(
            "the gateway needs --agentctl-key-file: the release key agentctl tokens come from"
        )
    token_of = TokenDeriver(read_key(config.agentctl_key_file))
    app = web.Application(middlewares=[loopback_hosts_only] if config.insecure_dev_mode else [])
    app[CONFIG] = config
    app[ORIGINS] = frozenset(config.allowed_origins)  # normalized by the settings
    app[USERS] = Counter()
    app.router.add_get("/ws", ws_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
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
            token_of,
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
            negative_entries=config.auth_negative_cache_size,
            max_reviews=config.max_token_reviews,
            failures=FailureLimiter(config.auth_failure_rate, config.auth_failure_burst),
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


def serve_metrics(config: GatewayConfig) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context for `app`: `/metrics`, `/healthz` and `/readyz` on `metrics_port`, a port clients of
    `/ws` need not reach (the chart's Service for clients does not name it)."""

    async def listener(app: web.Application) -> AsyncIterator[None]:
        probes = web.Application()
        probes[CACHE] = app[CACHE]
        probes.router.add_get("/metrics", metrics_handler)
        probes.router.add_get("/healthz", healthz)
        probes.router.add_get("/readyz", readyz)
        runner = web.AppRunner(probes, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, config.metrics_host, config.metrics_port).start()
        try:
            yield
        finally:
            await runner.cleanup()

    return listener


async def close_all(app: web.Application) -> None:
    with contextlib.suppress(KeyError):
        for sub in list(app[REGISTRY].subscribers):
            if isinstance(sub, Connection):
                await sub.ws.close()


def describe(app: web.Application) -> dict[str, Any]:
    return {"sessions": len(app[CACHE].sessions()), "clients": len(app[REGISTRY].subscribers)}
