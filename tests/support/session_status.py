"""A session's status as the operator and the egress proxy would write it (usage, the BudgetExhausted condition,
agentctl ready), for gateway tests that run no operator; a stand-in agentctl that records what reaches it; and a
namespace no test operator serves, so nothing rewrites that status."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from kubernetes import client

from agentsession.api.constants import GROUP, PLURAL, VERSION

USAGE = {"inputTokens": 1200, "outputTokens": 340, "cachedTokens": 5000, "requests": 3, "costUSD": "0.0123"}
WHY = "3 model requests reached the budget of 3"


class StandInAgentctl:
    """Answers every request with 503 (agentctl restarting, as far as the gateway can tell) and remembers it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.port = 0

    async def _any(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        return web.json_response({"error": "restarting"}, status=503)

    def prompts(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if "prompt" in r[1]]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        return app


@pytest.fixture
def own_namespace(kube_api: Any) -> Iterator[str]:
    """A namespace outside the `t-*` pattern the tests' operators serve: no operator rewrites the status a test
    writes there. A test module uses it as its `namespace`."""
    core = client.CoreV1Api(kube_api)
    name = f"gw-budget-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"app.kubernetes.io/part-of": "agentsession-tests"})))  # fmt: skip
    try:
        yield name
    finally:
        core.delete_namespace(name, body=client.V1DeleteOptions(propagation_policy="Background"))


@pytest.fixture
async def stand_in_agentctl() -> AsyncIterator[StandInAgentctl]:
    stand_in = StandInAgentctl()
    runner = web.AppRunner(stand_in.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stand_in.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield stand_in
    await runner.cleanup()


def _condition(kind: str, status: bool, reason: str, message: str = "") -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message,
            "lastTransitionTime": now}  # fmt: skip


def write_status(kube_api: Any, namespace: str, name: str, port: int, *, exhausted: bool) -> None:
    """The status of a running session whose agentctl is the stand-in, with usage and the budget condition."""
    budget = (
        _condition("BudgetExhausted", True, "Exhausted", WHY)
        if exhausted
        else _condition("BudgetExhausted", False, "WithinBudget")
    )
    status = {
        "phase": "Ready",
        "podName": f"{name}-pod",
        "podUID": "00000000-0000-0000-0000-000000000001",
        "podIP": "127.0.0.1",
        "agentctlEndpoint": f"http://127.0.0.1:{port}",
        "usage": USAGE,
        "conditions": [
            _condition("AgentctlReady", True, "Ready"),
            _condition("AgentInitialized", True, "Initialized"),
            _condition("Ready", True, "Ready"),
            budget,
        ],
    }
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": status}
    )
