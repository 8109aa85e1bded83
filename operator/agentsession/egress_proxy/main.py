"""`agentsession-egress-proxy`: the only way out of a session pod."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiohttp import web

from agentsession.egress_proxy.app import Listener, metrics_app
from agentsession.egress_proxy.credentials import SecretCache
from agentsession.egress_proxy.directory import KubeDirectory
from agentsession.egress_proxy.events import DenialEvents
from agentsession.egress_proxy.ledger import Ledger
from agentsession.egress_proxy.prices import PriceTable
from agentsession.egress_proxy.settings import PROG, ProxySettings, parse_args
from agentsession.egress_proxy.state import Proxy
from agentsession.egress_proxy.upstream import PolicyResolver, client_session, tls_context
from agentsession.kube.client import connect
from agentsession.logs import setup_logging
from agentsession.tasks import Supervisor

log = logging.getLogger("agentsession.egress_proxy")


async def serve(settings: ProxySettings, stop: asyncio.Event) -> None:
    prices = PriceTable.load(settings.prices_file)
    context = tls_context(settings.upstream_ca_file)
    kube = await connect(settings.kubeconfig)
    directory = KubeDirectory(
        kube,
        settings.namespaces or None,
        inactivity_timeout=settings.watch_inactivity_timeout,
        server_timeout=settings.watch_server_timeout,
    )
    resolver = PolicyResolver(settings.resolved())
    http = client_session(
        resolver,
        context,
        max_connections=settings.max_connections,
        connect_timeout=settings.connect_timeout_seconds,
        read_timeout=settings.read_timeout_seconds,
    )
    proxy = Proxy(
        settings=settings,
        directory=directory,
        ledger=Ledger(kube),
        secrets=SecretCache(kube, ttl=settings.secret_cache_seconds, size=settings.secret_cache_size),
        prices=prices,
        events=DenialEvents(kube, settings.event_interval_seconds),
        resolver=resolver,
        http=http,
    )
    background = Supervisor("egress proxy", log)
    listener = Listener(proxy)
    probes = web.AppRunner(metrics_app(proxy), access_log=None)
    try:
        directory.start()
        background.spawn(proxy.ledger.run(settings.flush_interval_seconds), "usage flush")
        await probes.setup()
        await web.TCPSite(probes, settings.metrics_host, settings.metrics_port).start()
        port = await listener.start(settings.host, settings.port)
        log.info(
            "egress proxy listening on %s:%d (metrics and probes on %s:%d)",
            settings.host, port, settings.metrics_host, settings.metrics_port,
        )  # fmt: skip
        await stop.wait()
    finally:
        log.info("egress proxy stopping")
        await listener.stop()
        await background.close()
        # What was metered since the last flush is written before the process goes.
        await proxy.ledger.flush()
        await proxy.events.close()
        await directory.stop()
        await probes.cleanup()
        await http.close()
        await kube.close()


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    setup_logging(settings.log_format, settings.log_level)
    try:
        PriceTable.load(settings.prices_file)
    except (OSError, ValueError) as error:
        print(f"{PROG}: error: --prices-file: {error}", file=sys.stderr)
        return 2

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
