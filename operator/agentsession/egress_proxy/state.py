"""What every handler of the proxy shares: its settings and the pieces built from them."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
from aiohttp import web

from agentsession.egress_proxy.credentials import SecretCache
from agentsession.egress_proxy.directory import Directory
from agentsession.egress_proxy.events import DenialEvents
from agentsession.egress_proxy.ledger import Ledger
from agentsession.egress_proxy.prices import PriceTable
from agentsession.egress_proxy.settings import ProxySettings
from agentsession.egress_proxy.upstream import PolicyResolver


@dataclass
class Proxy:
    settings: ProxySettings
    directory: Directory
    ledger: Ledger
    secrets: SecretCache
    prices: PriceTable
    events: DenialEvents
    resolver: PolicyResolver
    http: aiohttp.ClientSession


PROXY = web.AppKey("proxy", Proxy)


def peer_of(request: web.Request) -> str | None:
    """The calling address as the TCP connection says (never a header the caller wrote)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return str(peer[0]) if peer else None
