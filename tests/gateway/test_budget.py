"""A session's usage and spent budget, through a real gateway over WebSocket, against a real API server.

No operator runs: the test writes the status the operator and the egress proxy would (usage, the BudgetExhausted
condition, agentctl ready) through the status subresource. A stand-in agentctl on loopback records every request
the gateway makes, so "nothing reached agentctl" is something it can check.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.conftest import Client, service_account_token
from tests.support.gateway import of_type
from tests.support.kube import NOWHERE, Sessions
from tests.support.session_status import (
    USAGE,
    WHY,
    StandInAgentctl,
    own_namespace,
    stand_in_agentctl,
    write_status,
)

pytestmark = pytest.mark.cluster

__all__ = ["own_namespace", "stand_in_agentctl"]  # fixtures


@pytest.fixture
def namespace(own_namespace: str) -> str:
    return own_namespace


@pytest.fixture
def agentctl(stand_in_agentctl: StandInAgentctl) -> StandInAgentctl:
    return stand_in_agentctl


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
