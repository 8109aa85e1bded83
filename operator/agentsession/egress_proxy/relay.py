"""Headers in and out of a proxied exchange, and the answer passed to the caller chunk by chunk as it comes."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from agentsession.egress_proxy import metrics

# RFC 9110 7.6.1: meaningful for one connection only, never forwarded.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te",
     "trailer", "transfer-encoding", "upgrade"}
)  # fmt: skip
# Set by the client library for the upstream request itself.
_RECOMPUTED = frozenset({"host", "content-length", "expect"})


def _connection_tokens(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> set[str]:
    return {token.strip().lower() for value in headers.getall("Connection", ()) for token in value.split(",")}


def outgoing(headers: CIMultiDictProxy[str], drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """The caller's headers for the upstream, without hop-by-hop ones and without those in `drop`."""
    dropped = HOP_BY_HOP | _RECOMPUTED | _connection_tokens(headers) | {name.lower() for name in drop}
    return CIMultiDict((name, value) for name, value in headers.items() if name.lower() not in dropped)


def incoming(headers: CIMultiDictProxy[str], *, decoded: bool) -> CIMultiDict[str]:
    """The upstream's answer headers for the caller; `decoded` when the client library undid a content coding."""
    dropped = HOP_BY_HOP | _connection_tokens(headers)
    if decoded and "Content-Encoding" in headers:
        dropped |= {"content-encoding", "content-length"}
    return CIMultiDict((name, value) for name, value in headers.items() if name.lower() not in dropped)


async def relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    *,
    decoded: bool,
    on_chunk: Callable[[bytes], None] | None = None,
) -> web.StreamResponse:
    """Writes each chunk to the caller as soon as it arrives: nothing is held back, so streams stay streams."""
    headers = incoming(upstream.headers, decoded=decoded)
    length = headers.pop("Content-Length", None)
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    if length is not None and length.isdigit():
        response.content_length = int(length)
    await response.prepare(request)
    try:
        async for chunk in upstream.content.iter_any():
            if on_chunk is not None:
                on_chunk(chunk)
            metrics.BYTES.labels("downstream").inc(len(chunk))
            await response.write(chunk)
        await response.write_eof()
    except (ConnectionResetError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError):
        # The caller hung up, or the upstream broke off mid-answer: the caller sees the answer end early.
        if request.transport is not None:
            request.transport.close()
    return response
