"""The gateway follows every ready agent at once: one update stream per agent stays open, more of them than an
HTTP client's default connection cap. The real gateway application on an in-memory API server, and one stand-in
agentctl (the scale benchmarks') answering for all the agents over loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from benchmarks.agentctl_standin import STATS_PATH
from benchmarks.agentctl_standin import build_app as standin_app

from agentsession.api.constants import API_VERSION, KIND
from agentsession.gateway.config import GatewayConfig
from agentsession.gateway.server import CACHE, build_app
from agentsession.testing.fake_kube import FakeKube
from tests.component.conftest import wait_until
from tests.support.release_key import key_file

NS = "ns"
AGENTS = 130  # beyond aiohttp's default of 100 connections per client session
WAIT = 30.0


def ready_session(name: str) -> dict[str, object]:
    ready = {"status": "True", "reason": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}"},
        "spec": {"agent": {"type": "demo"}},
        "status": {
            "phase": "Ready",
            "conditions": [{"type": t, **ready} for t in ("AgentctlReady", "AgentInitialized", "Ready")],
            "podUID": f"pod-{name}",
            "podIP": "10.0.0.1",
            "agentctlEndpoint": "http://10.0.0.1:9999",
        },
    }


@pytest.fixture
async def standin() -> AsyncIterator[TestServer]:
    async with TestServer(standin_app()) as server:
        yield server


async def test_the_gateway_keeps_an_update_stream_open_to_every_ready_agent(standin: TestServer) -> None:
    kube = FakeKube()
    for i in range(AGENTS):
        kube.put(ready_session(f"s{i}"))
    config = GatewayConfig(
        insecure_dev_mode=True,
        agentctl_key_file=key_file(),
        namespaces=[NS],
        agentctl_host_override="127.0.0.1",
        agentctl_port_override=standin.port,
    )
    app = build_app(config, kube=kube)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        async with aiohttp.ClientSession() as http:

            async def open_streams() -> int:
                async with http.get(str(standin.make_url(STATS_PATH))) as answer:
                    return int((await answer.json())["open_streams"])

            async def all_followed() -> bool:
                return app[CACHE].synced and await open_streams() == AGENTS

            await wait_until(all_followed, f"an update stream to each of {AGENTS} agents", within=WAIT)
    finally:
        await runner.cleanup()
