"""Where the proxy may connect, and the one HTTP client it connects with.

Names in `--resolve` go to the address given there (tests and air-gapped clusters name stand-ins that way); any
other name is resolved by DNS, and an answer that leads to loopback, link-local (cloud metadata among them) or an
unspecified or multicast address is refused: an allowed name must not become a way to the proxy's own node.
Upstream TLS is verified against the system's CAs plus `--upstream-ca-file`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

# Metadata services that are not link-local: AWS's IPv6 one and Alibaba Cloud's.
METADATA_ADDRESSES: Final = frozenset(
    {ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")}
)


class Unreachable(OSError):
    """The proxy will not connect there; the message may go to the client (it names only the host)."""


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def blocked(address: str) -> bool:
    ip = ip_literal(address)
    if ip is None:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip in METADATA_ADDRESSES
    )


class PolicyResolver(AbstractResolver):
    def __init__(
        self, overrides: Mapping[str, tuple[str, int]], inner: AbstractResolver | None = None
    ) -> None:
        self._overrides = dict(overrides)
        self._inner = inner or aiohttp.ThreadedResolver()

    def check_literal(self, host: str) -> None:
        """The HTTP client connects to an address in a URL without asking the resolver: checked here instead."""
        if ip_literal(host) is not None and not self.overridden(host) and blocked(host):
            raise Unreachable(f"{host} is an address the egress proxy does not connect to")

    def overridden(self, host: str) -> bool:
        return host.lower().rstrip(".") in self._overrides

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        name = host.lower().rstrip(".")
        override = self._overrides.get(name)
        if override is not None:
            address, to_port = override
            kind = socket.AF_INET6 if ":" in address else socket.AF_INET
            return [
                ResolveResult(
                    hostname=host,
                    host=address,
                    port=to_port,
                    family=kind,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            ]
        if ip_literal(name) is not None:
            if blocked(name):
                raise Unreachable(f"{host} is an address the egress proxy does not connect to")
            kind = socket.AF_INET6 if ":" in name else socket.AF_INET
            return [
                ResolveResult(
                    hostname=host,
                    host=name.strip("[]"),
                    port=port,
                    family=kind,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            ]
        try:
            results = await self._inner.resolve(host, port, family)
        except OSError as error:
            raise Unreachable(f"{host} does not resolve") from error
        allowed = [result for result in results if not blocked(result["host"])]
        if not allowed:
            raise Unreachable(f"{host} resolves only to addresses the egress proxy does not connect to")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    return context


def client_session(
    resolver: PolicyResolver,
    context: ssl.SSLContext,
    *,
    max_connections: int,
    connect_timeout: float,
    read_timeout: float,
) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(resolver=resolver, ssl=context, limit=max_connections, limit_per_host=0)
    return aiohttp.ClientSession(
        connector=connector,
        # No total limit: a model's stream lasts as long as it lasts; a silent upstream is dropped instead.
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout),
        # The agent's own headers go through as they are; the proxy adds none of its own.
        skip_auto_headers=("User-Agent", "Content-Type"),
        auto_decompress=True,
        trust_env=False,
    )


async def open_tunnel(
    resolver: PolicyResolver, host: str, port: int, connect_seconds: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection to host:port, by the same rules as the HTTP client's."""
    results = await resolver.resolve(host, port, socket.AF_UNSPEC)
    error: OSError | None = None
    for result in results:
        try:
            async with asyncio.timeout(connect_seconds):
                return await asyncio.open_connection(result["host"], result["port"], limit=TUNNEL_CHUNK)
        except (OSError, TimeoutError) as failed:
            error = (
                failed if isinstance(failed, OSError) else OSError(f"connecting to {host}:{port} timed out")
            )
    raise Unreachable(f"{host}:{port} did not accept a connection") from error


TUNNEL_CHUNK: Final = 256 * 1024
