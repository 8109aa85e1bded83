"""The gateway's pure parts: status derivation, both codecs, and the per-client queue, without a cluster."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsession.api.views import SessionView
from agentsession.contract.live_state import LiveState
from agentsession.gateway import commands as c
from agentsession.gateway.auth import TTLCache
from agentsession.gateway.connection import Connection
from agentsession.gateway.events import (
    AgentctlReady,
    AgentStatusChanged,
    AgentUpdate,
    ErrorCode,
    Failure,
    HistoryPage,
    Reply,
    ShellOutput,
)
from agentsession.gateway.lifecycle_dialect import LifecycleCodec
from agentsession.gateway.replies import Initialized, Suspended
from agentsession.gateway.sessions import Session
from agentsession.gateway.status import (
    AGENT_INFO_FIELDS,
    CLUSTER_STATE_FIELDS,
    agent_info,
    budget_state,
    cluster_state,
    derive_status,
)
from agentsession.gateway.task_dialect import TaskCodec
from tests.support.release_key import token_of


def session(
    *, suspend: bool = False, phase: str | None = None, ready: bool = False, session_id: str | None = None,
    deleting: bool = False, init_reason: str = "Initializing",
) -> dict[str, Any]:  # fmt: skip
    conditions = [
        {"type": "Ready", "status": "True" if ready else "False", "reason": "Ready" if ready else "Starting",
         "message": "agentctl keeps crashing" if phase == "Failed" else "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "AgentInitialized", "status": "True" if ready else "False", "reason": init_reason, "message": "boom",
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
    ]  # fmt: skip
    meta: dict[str, Any] = {"namespace": "ns", "name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {
        "metadata": meta,
        "spec": {"suspend": suspend, "agent": {"type": "demo"}, "title": "T"},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "acp": {"sessionId": session_id, "currentModeId": "code"},
        },
    }


@pytest.mark.parametrize(
    ("obj", "live", "expected"),
    [
        (session(suspend=True), None, "uninitialized"),
        (session(suspend=True, session_id="s1"), None, "completed"),
        (session(phase="Starting"), None, "initializing"),
        (session(phase="Failed"), None, "failed"),
        (session(phase="Starting", init_reason="InitializeFailed"), None, "failed"),
        (session(phase="Ready", ready=True), None, "ready"),
        (session(phase="Ready", ready=True), LiveState("running", turn_running=True), "processing"),
        (session(phase="Ready", ready=True), LiveState("running"), "ready"),
        (session(phase="Ready", ready=True), LiveState("error", last_error="agent exited"), "failed"),
        (session(phase="Ready", ready=True), LiveState("starting"), "initializing"),
        (session(phase="Ready", ready=True, deleting=True), None, "killed"),
    ],
)
def test_derived_status(obj: dict[str, Any], live: LiveState | None, expected: str) -> None:
    status, error = derive_status(SessionView(obj), live)
    assert status == expected
    assert (error is not None) == (expected == "failed")


def test_a_node_not_reporting_is_failed_with_the_reason_until_it_is_back() -> None:
    obj = session(phase="Unknown")
    obj["status"]["conditions"][0].update(
        status="Unknown", reason="NodeNotReady", message="node n1 stopped reporting"
    )
    assert derive_status(SessionView(obj), LiveState("running")) == ("failed", "node n1 stopped reporting")


def test_agent_info_has_exactly_the_protocol_fields() -> None:
    info = agent_info(
        SessionView(session(phase="Ready", ready=True, session_id="s1")),
        LiveState("running", current_mode_id="ask"),
    )
    assert tuple(info) == AGENT_INFO_FIELDS
    assert info["id"] == "ns/a"
    assert info["currentModeId"] == "ask"  # the live mode wins over the one recorded at start
    assert info["cwd"] == "/workspace"


class _OneSession:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.one = Session.of(obj)

    def session(self, key: Any) -> Session:
        return self.one

    def add_listener(self, fn: Any) -> None:
        return None


@pytest.mark.parametrize(
    "update",
    [
        {"sessionUpdate": "current_mode_update", "currentModeId": "ask"},
        # Codex's shape: the mode is the config option of category "mode", among others.
        {
            "sessionUpdate": "config_option_update",
            "configOptions": [
                {"id": "model", "name": "Model", "category": "model", "type": "select",
                 "currentValue": "m1", "options": [{"value": "m1", "name": "M1"}]},
                {"id": "approval", "name": "Mode", "category": "mode", "type": "select", "currentValue": "ask",
                 "options": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}]},
            ],
        },
    ],
)  # fmt: skip
def test_a_mode_update_is_the_live_mode(update: dict[str, Any]) -> None:
    from agentsession.gateway.agents import AgentRegistry

    registry = AgentRegistry(_OneSession(session(phase="Ready", ready=True)), None, None, token_of)  # type: ignore[arg-type]
    rt = registry.links.link(("ns", "a"))
    rt.connected.set()
    entry = {"seq": 1, "kind": "session_update", "notification": {"sessionId": "s1", "update": update}}
    registry.links.on_entry(rt, entry)
    info = registry.info(registry.session(rt.key))
    assert info is not None
    assert info["currentModeId"] == "ask"  # not "code", the mode the session started in


@given(st.text(max_size=200))
def test_lifecycle_decoder_never_raises(text: str) -> None:
    result = LifecycleCodec().decode(text)
    assert isinstance(result, Failure | c.Command)


@given(st.dictionaries(st.sampled_from(["id", "type", "action", "payload"]),
                       st.one_of(st.none(), st.integers(), st.text(max_size=20), st.dictionaries(st.text(max_size=5), st.integers()))))  # fmt: skip
def test_task_decoder_never_raises(frame: dict[str, Any]) -> None:
    result = TaskCodec().decode(json.dumps(frame))
    if isinstance(result, Failure):
        encoded = TaskCodec().encode(result)
        assert encoded is not None
        assert set(encoded["payload"]) == {"code", "message", "details"}


def test_lifecycle_requests_and_typed_errors() -> None:
    codec = LifecycleCodec()
    cmd = codec.decode('{"type":"initialize_agent_request","agentId":"ns/a","requestId":"r"}')
    assert cmd == c.Command(c.INITIALIZE, "ns/a", {}, "r")
    bad = codec.decode(
        '{"type":"agent_permission_response","agentId":"ns/a","permissionId":"p","requestId":"q"}'
    )
    assert isinstance(bad, Failure)
    assert (bad.code, bad.request_id) == ("validation_error", "q")
    frame = codec.encode(bad)
    assert frame == {"type": "error", "payload": {"code": "validation_error", "message": bad.message, "requestId": "q",
                                                  "requestType": "agent_permission_response"}}  # fmt: skip
    assert codec.encode(AgentctlReady("ns/a", "uid")) is None
    assert codec.encode(ShellOutput("ns/a", "output", "x")) is None


HISTORY = [
    {"seq": 1, "timestamp": "t1", "kind": "session_update", "notification": {"n": 1}},
    {"seq": 2, "timestamp": "t2", "kind": "permission_request", "notification": {"pending_id": "p"}},
]


def test_agent_initialized_and_agent_history_shapes() -> None:
    reply = Reply(c.INITIALIZE, Initialized("ns/a", {"id": "ns/a"}, HISTORY, 2), request_id="r")
    frame = LifecycleCodec().encode(reply)
    assert frame == {"type": "agent_initialized", "payload": {"agentId": "ns/a", "info": {"id": "ns/a"}, "updates": [
        {"agentId": "ns/a", "timestamp": "t1", "notification": {"n": 1}}], "next": 2, "requestId": "r"}}  # fmt: skip
    page = LifecycleCodec().encode(HistoryPage(c.INITIALIZE, "ns/a", HISTORY, None, "r"))
    assert page == {"type": "agent_history", "payload": {"agentId": "ns/a", "requestId": "r", "updates": [
        {"agentId": "ns/a", "timestamp": "t1", "notification": {"n": 1}}], "next": None}}  # fmt: skip


def test_task_start_pages_of_history_name_their_request() -> None:
    frame = TaskCodec().encode(HistoryPage(c.INITIALIZE, "ns/a", HISTORY, 7, envelope_id="start-1"))
    assert frame is not None
    assert (frame["type"], frame["action"]) == ("notification", "task.history")
    assert frame["payload"] == {"task_id": "ns/a", "request_id": "start-1", "updates": HISTORY, "next": 7}


def test_task_envelope_and_readiness_notification() -> None:
    codec = TaskCodec()
    cmd = codec.decode(
        '{"id":"1","type":"request","action":"shell.input","payload":{"task_id":"ns/a","data":"ls\\n"}}'
    )
    assert cmd == c.Command(c.SHELL_INPUT, "ns/a", {"data": "ls\n"}, envelope_id="1")
    frame = codec.encode(AgentctlReady("ns/a", "uid-1"))
    assert frame is not None
    assert set(frame) == {"id", "type", "action", "payload", "timestamp"}
    assert (frame["type"], frame["action"]) == ("notification", "task.session.agentctl_ready")
    assert frame["payload"] == {"task_id": "ns/a", "task_session_id": "uid-1"}
    out = codec.encode(ShellOutput("ns/a", "output", "hi", None))
    assert out is not None
    assert out["payload"] == {"task_id": "ns/a", "type": "output", "data": "hi", "code": None}
    unknown = codec.decode('{"id":"2","type":"request","action":"nope","payload":{}}')
    assert isinstance(unknown, Failure)
    err = codec.encode(unknown)
    assert err is not None
    assert (err["id"], err["type"], err["payload"]["code"]) == ("2", "error", "UNKNOWN_ACTION")


def test_cluster_state_is_the_phase_conditions_and_startup_beside_agent_info() -> None:
    obj = session(phase="Starting")
    obj["status"].update(podName="a-agent", startup={"source": "Cold", "agentctlReadySeconds": 1.25})
    state = cluster_state(SessionView(obj))
    assert tuple(state) == CLUSTER_STATE_FIELDS
    assert state["phase"] == "Starting"
    assert state["conditions"][0] == {"type": "Ready", "status": "False", "reason": "Starting", "message": "",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    assert (state["podName"], state["startup"]) == (
        "a-agent",
        {"source": "Cold", "agentctlReadySeconds": 1.25},
    )
    assert cluster_state(SessionView({"metadata": {"namespace": "ns", "name": "new"}}))["conditions"] == []


USAGE = {"inputTokens": 1200, "outputTokens": 340, "cachedTokens": 5000, "requests": 3, "costUSD": "0.0123",
         "updatedTime": "2026-01-01T00:02:00Z"}  # fmt: skip


def _budget_condition(status: str, message: str = "") -> dict[str, Any]:
    return {"type": "BudgetExhausted", "status": status, "reason": "Exhausted" if status == "True" else "WithinBudget",
            "message": message, "lastTransitionTime": "2026-01-01T00:02:00Z"}  # fmt: skip


def test_cluster_state_carries_usage_and_the_budget_condition() -> None:
    obj = session(phase="Ready", ready=True)
    fresh = cluster_state(SessionView(obj))
    assert (fresh["usage"], fresh["budget_exhausted"], fresh["budget_message"]) == (None, False, None)
    obj["status"]["usage"] = USAGE
    obj["status"]["conditions"].append(_budget_condition("False"))
    within = cluster_state(SessionView(obj))
    assert within["usage"] == USAGE, "status.usage as the proxy wrote it"
    assert (within["budget_exhausted"], within["budget_message"]) == (False, None)
    why = "3 model requests reached the budget of 3"
    obj["status"]["conditions"][-1] = _budget_condition("True", why)
    spent = cluster_state(SessionView(obj))
    assert (spent["budget_exhausted"], spent["budget_message"]) == (True, why)
    assert budget_state(SessionView(obj)) == (True, why)
    # Both dialects carry it with the rest of the cluster state.
    changed = AgentStatusChanged("ns/a", agent_info(SessionView(obj), None), 0.0, spent)
    assert (LifecycleCodec().encode(changed) or {})["payload"]["cluster"]["budget_exhausted"] is True
    assert (TaskCodec().encode(changed) or {})["payload"]["cluster"]["usage"] == USAGE


def test_budget_exhausted_is_a_typed_error_in_both_dialects() -> None:
    refused = Failure(ErrorCode.BUDGET_EXHAUSTED, "ns/a has exhausted its budget", c.PROMPT, "r", "e",
                      {"agentId": "ns/a"})  # fmt: skip
    lifecycle = LifecycleCodec().encode(refused)
    assert lifecycle == {"type": "error", "payload": {"code": "budget_exhausted", "message": refused.message,
                                                      "requestId": "r", "requestType": "send_agent_message",
                                                      "details": {"agentId": "ns/a"}}}  # fmt: skip
    task = TaskCodec().encode(refused)
    assert task is not None
    assert (task["id"], task["type"], task["action"]) == ("e", "error", "session.prompt")
    assert task["payload"]["code"] == "BUDGET_EXHAUSTED"


def test_suspend_and_the_cluster_state_in_both_dialects() -> None:
    lifecycle, task = LifecycleCodec(), TaskCodec()
    assert lifecycle.decode('{"type":"suspend_agent","agentId":"ns/a"}') == c.Command(c.SUSPEND, "ns/a", {})
    assert task.decode('{"id":"s","action":"task.suspend","payload":{"task_id":"ns/a"}}') == c.Command(
        c.SUSPEND, "ns/a", {}, envelope_id="s"
    )
    cluster = {"phase": "Ready"}
    changed = AgentStatusChanged("ns/a", {"status": "ready"}, 0.0, cluster)
    assert (lifecycle.encode(changed) or {})["payload"]["cluster"] == cluster
    assert (task.encode(changed) or {})["payload"]["cluster"] == cluster
    hello = lifecycle.hello([{"id": "ns/a"}], {"ns/a": cluster})
    assert hello == {
        "type": "session_state",
        "payload": {"agents": [{"id": "ns/a"}], "cluster": {"ns/a": cluster}},
    }
    answered = lifecycle.encode(Reply(c.SUSPEND, Suspended("ns/a"), "r"))
    assert answered == {"type": "ack", "payload": {"requestType": "suspend_agent", "requestId": "r",
                                                   "agentId": "ns/a", "suspended": True}}  # fmt: skip


def test_ttl_cache_is_bounded() -> None:
    cache: TTLCache[int, int] = TTLCache(ttl=60, max_entries=3)
    for i in range(10):
        cache.put(i, i)
    assert len(cache) == 3
    assert cache.get(0) is None
    assert cache.get(9) == 9


class _StuckSocket:
    """A WebSocket whose peer never reads: every send blocks."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed_with: int | None = None

    async def send_str(self, data: str) -> None:
        self.sent.append(data)
        await asyncio.Event().wait()

    async def close(self, code: int = 1000, message: bytes = b"") -> None:
        self.closed_with = code


async def test_slow_consumer_is_told_and_dropped() -> None:
    from agentsession.gateway.auth import DEV_IDENTITY

    ws = _StuckSocket()
    conn = Connection(ws, LifecycleCodec(), DEV_IDENTITY, None, queue_size=4)  # type: ignore[arg-type]
    conn.start()
    for i in range(20):
        conn.deliver(AgentStatusChanged("ns/a", {"status": "ready", "n": i}))
    # The error frame gets a bounded chance to go out (2 s) before the socket is closed.
    for _ in range(300):
        if ws.closed_with is not None:
            break
        await asyncio.sleep(0.02)
    assert ws.closed_with == 4008
    assert json.loads(ws.sent[-1])["payload"]["code"] == "slow_consumer"
    assert conn.closed
    conn.deliver(AgentUpdate("ns/a", 1, "t", "session_update", {}))  # ignored once closed
    await conn.close()
