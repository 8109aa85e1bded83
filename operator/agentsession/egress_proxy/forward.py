"""The forward proxy of the session pods' HTTPS_PROXY and HTTP_PROXY: `CONNECT host:port` tunnels, and plain HTTP
requests with an absolute URI. The caller is the session pod at the connection's address; the host must be on its
allowlist (spec, namespace annotation, chart) and the port open, else a 403 that says which host and what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Final

import aiohttp
from aiohttp import web
from yarl import URL

from agentsession.egress_proxy import metrics
from agentsession.egress_proxy.errors import text_error, text_head
from agentsession.egress_proxy.identity import Caller, Refusal, by_address, settled
from agentsession.egress_proxy.policy import egress_refusal
from agentsession.egress_proxy.relay import outgoing, relay
from agentsession.egress_proxy.state import Proxy, peer_of
from agentsession.egress_proxy.upstream import TUNNEL_CHUNK, Unreachable, open_tunnel

log = logging.getLogger(__name__)

HEAD_BYTES: Final = 16 * 1024  # a CONNECT request's line and headers
HEAD_SECONDS: Final = 10.0
_AUTHORITY = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]{1,253}):(?P<port>[0-9]{1,5})$")
ESTABLISHED: Final = b"HTTP/1.1 200 Connection established\r\n\r\n"


async def decide(
    proxy: Proxy, peer: str | None, host: str, port: int, ports: list[int], kind: str
) -> Caller | Refusal:
    """The caller when it may reach host:port; else the refusal, counted, and reported on the session."""
    caller = await settled(lambda: by_address(proxy.directory, peer))
    if isinstance(caller, Refusal):
        metrics.DENIED.labels("", caller.type).inc()
        return caller
    session = caller.session
    annotations = proxy.directory.namespace_annotations(session.namespace)
    refusal = egress_refusal(session, host, port, ports, annotations, proxy.settings.default_allow)
    if refusal is not None:
        metrics.DENIED.labels(session.namespace, refusal.type).inc()
        proxy.events.report(session, host, refusal.message)
        return refusal
    metrics.REQUESTS.labels(session.namespace, session.agent_type, kind).inc()
    return caller


async def plain_http(request: web.Request, proxy: Proxy) -> web.StreamResponse:
    """A request whose target is an absolute http:// URI, as HTTP_PROXY clients send."""
    url = URL(request.raw_path, encoded=True)
    if url.scheme != "http" or not url.host:
        return text_error(
            Refusal(400, "bad_request", "send https:// through CONNECT; plain requests need http://")
        )
    host, port = url.host.lower(), url.port or 80
    decided = await decide(proxy, peer_of(request), host, port, proxy.settings.http_ports, "http")
    if isinstance(decided, Refusal):
        return text_error(decided)
    data = request.content.iter_any() if request.body_exists else None
    metrics.CONNECTIONS.inc()
    try:
        proxy.resolver.check_literal(host)
        async with proxy.http.request(
            request.method, url, headers=outgoing(request.headers), data=data, allow_redirects=False
        ) as upstream:
            return await relay(request, upstream, decoded=False)
    except (aiohttp.ClientError, Unreachable, TimeoutError):
        return text_error(Refusal(502, "upstream_unavailable", f"{host}:{port} could not be reached"))
    finally:
        metrics.CONNECTIONS.dec()


def parse_connect(head: bytes) -> tuple[str, int] | None:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != "CONNECT" or not parts[2].startswith("HTTP/1."):
        return None
    match = _AUTHORITY.match(parts[1])
    if match is None or not 1 <= int(match["port"]) <= 65535:
        return None
    return match["host"].strip("[]").lower().rstrip("."), int(match["port"])


async def tunnel(proxy: Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One CONNECT: its head, the decision, then bytes both ways until either side closes."""
    peer_name = writer.get_extra_info("peername")
    peer = str(peer_name[0]) if peer_name else None
    try:
        async with asyncio.timeout(HEAD_SECONDS):
            head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError, ConnectionError):
        writer.close()
        return
    target = parse_connect(head)
    if target is None:
        await _answer(writer, text_head(Refusal(400, "bad_request", "expected CONNECT host:port HTTP/1.1")))
        return
    host, port = target
    decided = await decide(proxy, peer, host, port, proxy.settings.connect_ports, "connect")
    if isinstance(decided, Refusal):
        await _answer(writer, text_head(decided))
        return
    try:
        up_reader, up_writer = await open_tunnel(
            proxy.resolver, host, port, proxy.settings.connect_timeout_seconds
        )
    except Unreachable as error:
        await _answer(writer, text_head(Refusal(502, "upstream_unavailable", str(error))))
        return
    metrics.CONNECTIONS.inc()
    try:
        writer.write(ESTABLISHED)
        await asyncio.gather(
            _pump(reader, up_writer, "upstream"),
            _pump(up_reader, writer, "downstream"),
            return_exceptions=True,
        )
    finally:
        metrics.CONNECTIONS.dec()
        for end in (writer, up_writer):
            end.close()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, direction: str) -> None:
    counter = metrics.BYTES.labels(direction)
    try:
        while chunk := await source.read(TUNNEL_CHUNK):
            sink.write(chunk)
            counter.inc(len(chunk))
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        sink.close()


async def _answer(writer: asyncio.StreamWriter, answer: bytes) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(answer)
        await writer.drain()
    writer.close()


class FrontProtocol(asyncio.Protocol):
    """The proxy port's first look at a connection: a CONNECT goes to `tunnel`, anything else to aiohttp.

    aiohttp serves the model and git routes and plain HTTP; its CONNECT support is not a tunnel, so the choice is
    made on the first bytes, and the connection is handed to the chosen protocol with them."""

    def __init__(self, proxy: Proxy, http: web.Server, tasks: set[asyncio.Task[None]]) -> None:
        self._proxy = proxy
        self._http = http
        self._tasks = tasks
        self._transport: asyncio.Transport | None = None
        self._head = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self._head += data
        if len(self._head) < len(b"CONNECT ") and b"CONNECT "[: len(self._head)] == self._head:
            return  # too early to tell
        if self._head.startswith(b"CONNECT "):
            self._to_tunnel(self._transport)
        else:
            handler = self._http()
            self._transport.set_protocol(handler)
            handler.connection_made(self._transport)
            handler.data_received(self._head)

    def _to_tunnel(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=max(HEAD_BYTES, TUNNEL_CHUNK), loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(self._head)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        task = loop.create_task(tunnel(self._proxy, reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
