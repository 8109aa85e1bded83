"""The gateway's slow-consumer drop over real sockets: the real gateway application (in insecure dev mode, on an
in-memory API server) serves two real WebSocket clients on loopback; one stops reading."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentsession.gateway.config import GatewayConfig
from agentsession.gateway.connection import CLOSE_SLOW_CONSUMER, Connection
from agentsession.gateway.events import AgentStatusChanged
from agentsession.gateway.server import CACHE, REGISTRY, build_app
from agentsession.testing.fake_kube import FakeKube
from tests.component.conftest import wait_until
from tests.support.gateway import Client
from tests.support.release_key import key_file

WAIT = 20.0
QUEUE_SIZE = 4
# Big frames fill the kernel's socket buffers quickly, so the stalled client's queue overflows within a few
# hundred broadcasts instead of many thousands.
PADDING = "x" * 256 * 1024
MAX_BROADCASTS = 2000


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[web.Application, str]]:
    config = GatewayConfig(
        insecure_dev_mode=True, queue_size=QUEUE_SIZE, namespaces=["ns"], agentctl_key_file=key_file()
    )
    app = build_app(config, kube=FakeKube())
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        await wait_until(_true(lambda: app[CACHE].synced), "the gateway's session cache to sync", within=WAIT)
        yield app, f"ws://{host}:{port}/ws"
    finally:
        await runner.cleanup()


def _connections(app: web.Application) -> list[Connection]:
    return [sub for sub in app[REGISTRY].subscribers if isinstance(sub, Connection)]


async def _wait_for_clients(app: web.Application, count: int) -> None:
    await wait_until(_true(lambda: len(_connections(app)) >= count), f"{count} clients", within=WAIT)


def _true(probe: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return probe()

    return check


async def test_client_that_stops_reading_is_closed_as_slow_while_a_reading_client_gets_everything(
    gateway: tuple[web.Application, str],
) -> None:
    """A client that stops reading is told `slow_consumer` and closed with the slow-consumer close code once its
    queue overflows; the other client on the same gateway receives every broadcast, in order, meanwhile."""
    app, url = gateway
    async with aiohttp.ClientSession() as http:
        stalled = await http.ws_connect(url, max_msg_size=0)  # never read until it has been dropped
        await _wait_for_clients(app, 1)
        (stalled_conn,) = _connections(app)
        reading = Client(await http.ws_connect(url, max_msg_size=0))
        await _wait_for_clients(app, 2)

        sent = 0
        async with asyncio.timeout(WAIT):
            while not stalled_conn.dropped_slow and sent < MAX_BROADCASTS:
                app[REGISTRY].fanout.broadcast(
                    "ns", AgentStatusChanged("ns/a", {"status": "ready", "n": sent, "pad": PADDING})
                )
                sent += 1
                # Wait for the reading client each time, so only the stalled one can fall behind.
                await reading.wait_for(f"broadcast {sent - 1}", lambda f, n=sent - 1: _status_n(f) == n)
        assert stalled_conn.dropped_slow, f"the stalled client was never dropped after {sent} broadcasts"

        # What the stalled client gets once it reads again: what fit in the pipes, then the error, then the close.
        frames: list[dict[str, Any]] = []
        async with asyncio.timeout(WAIT):
            async for msg in stalled:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    frames.append(json.loads(msg.data))
        assert stalled.close_code == CLOSE_SLOW_CONSUMER
        assert frames[-1]["payload"]["code"] == "slow_consumer"

        # The reading client is still served after the other was dropped, and missed nothing before.
        app[REGISTRY].fanout.broadcast("ns", AgentStatusChanged("ns/a", {"status": "ready", "n": sent}))
        await reading.wait_for("the broadcast after the drop", lambda f: _status_n(f) == sent)
        numbers = [n for f in reading.frames if (n := _status_n(f)) is not None]
        assert numbers == list(range(sent + 1))
        assert reading.closed_code is None
        await reading.close()


def _status_n(frame: dict[str, Any]) -> int | None:
    payload = frame.get("payload")
    if not isinstance(payload, dict):
        return None
    for value in (payload, payload.get("agent"), payload.get("info")):
        if isinstance(value, dict) and isinstance(value.get("n"), int):
            return int(value["n"])
    return None
