"""lifecycle.drainTimeout on a node: a turn running when the session is suspended finishes or is cancelled at the
deadline, says so in an Event and in the history, and a template change waits for the turn to end.

The test reaches the pod's agentctl at its pod IP with the session's token (the node is this machine or routes to
it, as for the operator).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from tests.conftest import wait_until
from tests.support.kube import Sessions
from tests.support.processes import OperatorProcess

from agentsession.agentctl_client import AgentctlClient
from agentsession.contract.wire import JournalEntry, PendingPermission

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

# The demo agent waits for an answer when a prompt asks for a permission: a turn that runs until told.
PERMISSION_PROMPT = "this needs a permission"
# And streams one word per tick (0.05 s) with __slow__: a turn of about 2 s.
SLOW_PROMPT = "__slow__ " + " ".join(f"w{i}" for i in range(40))


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def agentctl(http: aiohttp.ClientSession, sessions: Sessions, name: str) -> AgentctlClient:
    return AgentctlClient(http, sessions.get(name)["status"]["agentctlEndpoint"], sessions.token(name))


async def suspend_and_wait_gone(sessions: Sessions, name: str) -> None:
    uid = sessions.pod(name).metadata.uid
    sessions.patch_spec(name, {"suspend": True})
    await asyncio.to_thread(wait_until, "the pod gone", lambda: sessions.pod_gone(name, uid), 90)


async def resumed_history(http: aiohttp.ClientSession, sessions: Sessions, name: str) -> list[JournalEntry]:
    """The journal, read through the next pod's agentctl: it lives on the workspace volume."""
    sessions.patch_spec(name, {"suspend": False})
    await sessions.until_ready(name)
    return (await agentctl(http, sessions, name).history()).updates


async def permission_asked(api: AgentctlClient) -> PendingPermission:
    """The turn's permission request, once the journal (replayed from its start, then live) shows it."""
    async with asyncio.timeout(30), api.updates(0) as entries:
        async for entry in entries:
            if entry.kind == "permission_request":
                break
    (pending,) = (await api.permissions()).pending
    return pending


def event(sessions: Sessions, name: str, reason: str) -> Any:
    return next((e for e in sessions.events(name) if e.reason == reason), None)


async def test_a_turn_that_ends_within_the_drain_timeout_finishes(
    node_operator: OperatorProcess, sessions: Sessions, http: aiohttp.ClientSession
) -> None:
    sessions.create("finish", {"lifecycle": {"drainTimeout": "60s"}, "workspace": {"size": "64Mi"}})
    await sessions.until_ready("finish")
    await agentctl(http, sessions, "finish").prompt(SLOW_PROMPT)
    await suspend_and_wait_gone(sessions, "finish")
    told = await asyncio.to_thread(
        wait_until, "a TurnFinished event", lambda: event(sessions, "finish", "TurnFinished"), 30
    )
    assert told.type == "Normal"
    assert "stop reason end_turn" in told.message

    history = await resumed_history(http, sessions, "finish")
    ends = [e.notification["stopReason"] for e in history if e.kind == "turn_end"]
    assert ends == ["end_turn"]
    # The operator's drain, then the idle one the agent container asks for when the pod stops.
    drains = [e.notification["outcome"] for e in history if e.kind == "drain"]
    assert drains[0] == "finished"
    # Every word of the turn reached the history before the pod went.
    said = "".join(
        e.notification["update"]["content"]["text"]
        for e in history
        if e.kind == "session_update" and e.notification["update"]["sessionUpdate"] == "agent_message_chunk"
    )
    assert "w39" in said


async def test_a_turn_still_running_at_the_deadline_is_cancelled_with_its_permission(
    node_operator: OperatorProcess, sessions: Sessions, http: aiohttp.ClientSession
) -> None:
    sessions.create("cancel", {"lifecycle": {"drainTimeout": "2s"}, "workspace": {"size": "64Mi"}})
    await sessions.until_ready("cancel")
    api = agentctl(http, sessions, "cancel")
    await api.prompt(PERMISSION_PROMPT)

    await permission_asked(api)
    await suspend_and_wait_gone(sessions, "cancel")
    told = await asyncio.to_thread(
        wait_until, "a TurnCancelled event", lambda: event(sessions, "cancel", "TurnCancelled"), 30
    )
    assert told.type == "Warning"
    assert "lifecycle.drainTimeout (2s)" in told.message
    assert "1 pending permission request answered as cancelled" in told.message

    history = await resumed_history(http, sessions, "cancel")
    resolved = [e.notification for e in history if e.kind == "permission_resolved"]
    assert [(r["outcome"], r["reason"]) for r in resolved] == [({"outcome": "cancelled"}, "turn_cancelled")]
    assert [e.notification["stopReason"] for e in history if e.kind == "turn_end"] == ["cancelled"]
    drains = [e.notification for e in history if e.kind == "drain"]
    assert drains[0]["outcome"] == "cancelled"
    assert drains[0]["cancelled_permissions"] == 1


async def test_a_template_change_replaces_the_pod_after_the_running_turn(
    node_operator: OperatorProcess, sessions: Sessions, http: aiohttp.ClientSession
) -> None:
    sessions.create("defer", {"workspace": {"emptyDir": True}})
    await sessions.until_ready("defer")
    first = sessions.pod("defer").metadata.uid
    api = agentctl(http, sessions, "defer")
    await api.prompt(PERMISSION_PROMPT)
    pending = await permission_asked(api)

    sessions.patch_spec("defer", {"podTemplate": {"labels": {"team": "blue"}}})
    waiting = await asyncio.to_thread(
        wait_until,
        "RestartPending=True",
        lambda: sessions.has_condition("defer", "RestartPending", "True"),
        30,
    )
    assert "when the running turn ends" in waiting["message"]
    assert sessions.pod("defer").metadata.uid == first
    assert sessions.has_condition("defer", "Ready", "True")

    await api.respond_permission(pending.pending_id, "allow")

    def replaced() -> bool:
        try:
            pod = sessions.pod("defer")
        except Exception:  # between the two pods
            return False
        return bool(pod.metadata.uid != first and pod.metadata.labels.get("team") == "blue")

    await asyncio.to_thread(wait_until, "the pod replaced after the turn", replaced, 90)
    assert sessions.condition("defer", "RestartPending") is None
    await sessions.until_ready("defer")
