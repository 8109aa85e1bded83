"""A session's usage and spent budget, through a real gateway over WebSocket, against a real API server.

No operator runs: the test writes the status the operator and the egress proxy would (usage, the BudgetExhausted
condition, agentctl ready) through the status subresource. A stand-in agentctl on loopback records every request
the gateway makes, so "nothing reached agentctl" is something it can check.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from kubernetes import client

from agentsession.api.constants import GROUP, PLURAL, VERSION
from tests.gateway.conftest import Client, service_account_token
from tests.support.gateway import of_type
from tests.support.kube import NOWHERE, Sessions

pytestmark = pytest.mark.cluster

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
def namespace(kube_api: Any) -> Iterator[str]:
    """A namespace of its own, outside the `t-*` pattern the tests' operators serve: no operator may rewrite the
    status this test writes."""
    core = client.CoreV1Api(kube_api)
    name = f"gw-budget-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"app.kubernetes.io/part-of": "agentsession-tests"})))  # fmt: skip
    try:
        yield name
    finally:
        core.delete_namespace(name, body=client.V1DeleteOptions(propagation_policy="Background"))


@pytest.fixture
async def agentctl() -> AsyncIterator[StandInAgentctl]:
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


def _cluster(frame: dict[str, Any], agent_id: str) -> dict[str, Any]:
    payload = frame["payload"]
    return payload["cluster"] if frame["type"] == "agent_status" else payload["cluster"][agent_id]


async def test_usage_and_a_spent_budget_reach_clients_and_prompts_stop_at_the_gateway(
    sessions: Sessions,
    namespace: str,
    kube_api: Any,
    start_gateway: Any,
    connect: Any,
    agentctl: StandInAgentctl,
) -> None:
    sessions.create("spent", {"title": "Spent", "podTemplate": {"nodeSelector": NOWHERE}})
    write_status(kube_api, namespace, "spent", agentctl.port, exhausted=True)
    token = service_account_token(kube_api, namespace, "ui", ["get", "list", "watch", "update", "patch"])
    gateway = start_gateway("--namespace", namespace)
    agent_id = f"{namespace}/spent"

    ui: Client = await connect(gateway.ws_url, token=token)
    state = await ui.wait_for("session_state", of_type("session_state"))
    cluster = _cluster(state, agent_id)
    assert {k: cluster["usage"][k] for k in USAGE} == USAGE
    assert (cluster["budget_exhausted"], cluster["budget_message"]) == (True, WHY)

    refused = await ui.request(
        {"type": "send_agent_message", "agentId": agent_id, "text": "one more", "requestId": "p1"},
        lambda f: f["type"] in ("ack", "error") and f["payload"].get("requestId") == "p1", "the prompt's answer",
    )  # fmt: skip
    assert refused["type"] == "error", refused
    assert refused["payload"]["code"] == "budget_exhausted"
    assert refused["payload"]["requestType"] == "send_agent_message"
    assert WHY in refused["payload"]["message"]
    assert "spec.budget" in refused["payload"]["message"]
    assert refused["payload"]["details"]["agentId"] == agent_id

    task: Client = await connect(gateway.ws_url, token=token, protocols=("task-session.v1",))
    answer = await task.request(
        {"id": "t1", "type": "request", "action": "session.prompt", "payload": {"task_id": agent_id, "text": "x"}},
        lambda f: f.get("id") == "t1", "the task prompt's answer",
    )  # fmt: skip
    assert (answer["type"], answer["action"]) == ("error", "session.prompt")
    assert answer["payload"]["code"] == "BUDGET_EXHAUSTED"
    assert agentctl.prompts() == [], "a refused prompt must not reach agentctl"

    # The budget is raised: the operator turns the condition False. Clients are told, and the next prompt goes to
    # agentctl (which the stand-in, restarting, does not take; that it arrived is what counts here).
    mark = len(ui.frames)
    write_status(kube_api, namespace, "spent", agentctl.port, exhausted=False)
    lifted = await ui.wait_for(
        "budget lifted",
        lambda f: f["type"] == "agent_status" and f["payload"]["cluster"]["budget_exhausted"] is False,
        since=mark,
    )
    assert lifted["payload"]["cluster"]["budget_message"] is None
    again = await ui.request(
        {"type": "send_agent_message", "agentId": agent_id, "text": "go on", "requestId": "p2"},
        lambda f: f["type"] in ("ack", "error") and f["payload"].get("requestId") == "p2", "the second answer",
    )  # fmt: skip
    assert again["payload"].get("code") != "budget_exhausted", again
    assert agentctl.prompts(), f"the prompt never reached agentctl: {agentctl.requests}"
