"""The parts of agentctl's ACP bridge, each alone: the phase machine's initialized event, what the agent's answers
leave in the ACP state, the agent's errors, message intake (journal, replay, modes, garbage), the prompt's
blocks, the authentication retry of session calls, and the lifecycle's one retry loop."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError

from agentsession.agentctl.acp_bridge import AgentBridge
from agentsession.agentctl.agent_input import Refusal
from agentsession.agentctl.bridge import lifecycle
from agentsession.agentctl.bridge.acp_session import AUTH_REQUIRED
from agentsession.agentctl.bridge.acp_state import CAPABILITIES_MAX_BYTES, MAX_KEY_AUTH_METHODS, AcpState
from agentsession.agentctl.bridge.agent_errors import ERROR_MAX_CHARS, AgentErrors
from agentsession.agentctl.bridge.intake import MAX_GARBAGE_REPORTS, MessageIntake
from agentsession.agentctl.bridge.phases import Phase, PhaseMachine
from agentsession.agentctl.bridge.turns import prompt_blocks
from agentsession.agentctl.errors import ApiError
from agentsession.agentctl.events import EventHub
from agentsession.agentctl.journal import Journal
from agentsession.agentctl.metrics import Metrics
from agentsession.agentctl.session_store import SessionStore
from tests.support.agentctl_bridge import unit_bridge

WAIT = 5.0


@dataclass
class Parts:
    journal: Journal
    hub: EventHub
    metrics: Metrics
    store: SessionStore
    acp: AcpState
    errors: AgentErrors
    intake: MessageIntake

    def entries(self) -> list[tuple[str, dict[str, Any]]]:
        return [(e.kind, json.loads(e.text)["notification"]) for e in self.journal.entries()]

    def count(self, metric: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(metric, labels) or 0.0


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Parts]:
    journal = Journal(tmp_path / "journal.jsonl")
    hub, metrics, acp = EventHub(journal), Metrics(), AcpState()
    store = SessionStore(tmp_path / "session.json")
    errors = AgentErrors(hub, metrics, lambda: acp.session_id)
    yield Parts(journal, hub, metrics, store, acp, errors, MessageIntake(acp, store, hub, metrics, errors))
    journal.close()


def update(kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s1", "update": {"sessionUpdate": kind, **fields}},
    }


CHUNK = {"content": {"type": "text", "text": "hi"}}


# ----- phases -----


async def test_the_initialized_event_follows_the_phase() -> None:
    phases = PhaseMachine()
    assert not await phases.wait_initialized(0)
    for phase in (Phase.ATTACHING, Phase.CONNECTED):
        phases.move(phase)
    waiting = asyncio.create_task(phases.wait_initialized(WAIT))
    await asyncio.sleep(0)
    assert not waiting.done()
    phases.move(Phase.INITIALIZED)
    assert await asyncio.wait_for(waiting, WAIT)
    assert phases.initialized
    phases.move(Phase.EXITED)
    assert not phases.initialized
    assert not await phases.wait_initialized(0)


# ----- the ACP state -----


def test_modes_come_from_a_mode_config_option_before_the_modes() -> None:
    acp = AcpState()
    modes = {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}]}
    option = {
        "id": "mode",
        "name": "Mode",
        "category": "mode",
        "type": "select",
        "currentValue": "code",
        "options": [{"value": "code", "name": "Code"}, {"value": "plan", "name": "Plan"}],
    }
    acp.set_modes(modes, [option])
    assert (acp.mode_config_id, acp.current_mode_id) == ("mode", "code")
    assert [m["id"] for m in acp.available_modes] == ["code", "plan"]
    acp.set_modes(modes, None)
    assert (acp.mode_config_id, acp.current_mode_id, acp.available_modes) == (
        None,
        "ask",
        [{"id": "ask", "name": "Ask"}],
    )
    acp.set_modes(None, None)
    assert acp.current_mode_id == "ask", "with neither, the modes known so far stay"


def test_the_agents_identity_is_kept_within_bounds() -> None:
    acp = AcpState()
    methods = [{"id": f"key-{i}", "type": "env_var"} for i in range(MAX_KEY_AUTH_METHODS + 2)]
    acp.set_identity(
        {
            "agentInfo": {"name": "demo", "version": "1"},
            "agentCapabilities": {"loadSession": True, "big": "x" * CAPABILITIES_MAX_BYTES},
            "authMethods": [
                {"id": "browser", "type": "agent"},
                {"id": "x" * 10_000, "type": "env_var"},
                *methods,
            ],
        }
    )
    assert acp.agent_info == {"name": "demo", "version": "1"}
    assert acp.agent_capabilities == {"loadSession": True}
    assert acp.load_session
    assert acp.key_auth_methods == [f"key-{i}" for i in range(MAX_KEY_AUTH_METHODS)]
    acp.set_identity({"agentInfo": {"name": 3}})
    assert (acp.agent_info, acp.agent_capabilities, acp.load_session) == (None, {}, False)


def test_clear_forgets_everything() -> None:
    acp = AcpState()
    acp.set_identity({"agentCapabilities": {"loadSession": True}})
    acp.session_id, acp.current_mode_id, acp.last_stop_reason = "s1", "code", "end_turn"
    acp.clear()
    assert vars(acp) == vars(AcpState())


# ----- the agent's errors -----


def test_an_error_is_cut_journaled_counted_and_kept_as_the_last(parts: Parts) -> None:
    parts.acp.session_id = "s1"
    parts.errors.record("x" * (ERROR_MAX_CHARS + 10), "agent_exited")
    message = "x" * ERROR_MAX_CHARS + "..."
    assert parts.errors.last_error == message
    assert parts.errors.last_error_at is not None
    assert parts.entries() == [
        ("agent_error", {"error": "agent_exited", "message": message, "session_id": "s1"})
    ]
    assert parts.count("agentctl_errors_total", kind="agent_exited") == 1
    parts.errors.note("initialize timed out")
    assert parts.errors.last_error == "initialize timed out"
    assert len(parts.entries()) == 1, "a noted error is its caller's answer, not a journal entry"


# ----- message intake -----


def test_only_the_agents_session_updates_are_taken(parts: Parts) -> None:
    assert not parts.intake.on_message({"jsonrpc": "2.0", "id": 1, "result": {}})
    assert not parts.intake.on_message({**update("plan", entries=[]), "id": 2})
    assert parts.entries() == []


def test_updates_are_journaled_as_sent_and_counted_by_kind(parts: Parts) -> None:
    assert parts.intake.on_message(update("agent_message_chunk", **CHUNK))
    assert parts.intake.on_message(update("a_kind_from_the_future", anything=1))
    assert parts.entries() == [
        ("session_update", update("agent_message_chunk", **CHUNK)["params"]),
        ("session_update", update("a_kind_from_the_future", anything=1)["params"]),
    ]
    assert parts.count("agentctl_session_updates_total", type="agent_message_chunk") == 1
    assert parts.count("agentctl_session_updates_total", type="unknown") == 1


def test_a_malformed_update_is_an_agent_error(parts: Parts) -> None:
    assert parts.intake.on_message({"jsonrpc": "2.0", "method": "session/update", "params": {"update": 3}})
    [(kind, error)] = parts.entries()
    assert (kind, error["error"]) == ("agent_error", "agent_protocol")
    assert error["message"].startswith("agent sent a malformed session/update: ")


@pytest.mark.parametrize(
    ("replay", "journaled"),
    [
        ("off", ["agent_message_chunk", "current_mode_update"]),
        ("conversation", ["current_mode_update"]),
        ("all", []),
    ],
)
def test_a_replay_is_not_journaled_again(parts: Parts, replay: Any, journaled: list[str]) -> None:
    parts.intake.replay = replay
    parts.intake.on_message(update("agent_message_chunk", **CHUNK))
    parts.intake.on_message(update("current_mode_update", currentModeId="plan"))
    assert [n["update"]["sessionUpdate"] for _, n in parts.entries()] == journaled
    assert parts.count("agentctl_session_updates_total", type="replayed") == 2 - len(journaled)
    assert parts.acp.current_mode_id == "plan", "a replayed update still says what the session is now"


def test_a_mode_the_agent_chose_is_the_one_to_resume(parts: Parts, tmp_path: Path) -> None:
    parts.intake.on_message(update("current_mode_update", currentModeId="plan"))
    assert SessionStore(tmp_path / "session.json").record.mode_id == "plan"


def test_garbage_is_reported_up_to_a_bound_per_attachment(parts: Parts) -> None:
    for _ in range(MAX_GARBAGE_REPORTS + 3):
        parts.intake.on_refused(Refusal("not JSON"))
    assert len(parts.entries()) == MAX_GARBAGE_REPORTS
    assert parts.count("agentctl_errors_total", kind="agent_protocol") == MAX_GARBAGE_REPORTS + 3
    parts.intake.attached()
    parts.intake.on_refused(Refusal("not JSON", id=7, request=True))
    assert parts.entries()[-1][1]["message"] == (
        "agent wrote a line to stdout that is not JSON-RPC agentctl accepts (not JSON); answered with an error"
    )


# ----- turns -----


def test_a_prompt_becomes_content_blocks_or_a_422_saying_where() -> None:
    [block] = prompt_blocks("hello", "s1")
    assert (block.type, block.text) == ("text", "hello")
    with pytest.raises(ApiError) as refused:
        prompt_blocks([{"type": "text", "text": "a"}, {"type": "image"}], "s1")
    assert (refused.value.status, refused.value.code) == (422, "validation_error")
    assert refused.value.message.startswith("invalid prompt content block at prompt.1")


# ----- the ACP session's authentication retry -----


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[AgentBridge]:
    with unit_bridge(tmp_path, attach_timeout=WAIT) as made:
        yield made


class KeyAgent:
    """A connection whose agent takes only the API-key methods it is told to."""

    def __init__(self, accepts: set[str]) -> None:
        self.accepts = accepts
        self.tried: list[str] = []

    async def authenticate(self, method_id: str) -> None:
        self.tried.append(method_id)
        if method_id not in self.accepts:
            raise RequestError(-32603, f"no key for {method_id}")


def initialized(bridge: AgentBridge, conn: KeyAgent, methods: list[str]) -> None:
    for phase in (Phase.ATTACHING, Phase.CONNECTED, Phase.INITIALIZED):
        bridge.phases.move(phase)
    bridge.attachment.conn = conn  # type: ignore[assignment]
    bridge.acp.key_auth_methods = methods


def asks_for_auth_once() -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls = [0]

    async def call() -> str:
        calls[0] += 1
        if calls[0] == 1:
            raise RequestError(AUTH_REQUIRED, "authentication required")
        return "opened"

    return calls, call


async def test_a_session_call_is_made_again_after_the_first_key_the_agent_takes(bridge: AgentBridge) -> None:
    conn = KeyAgent(accepts={"openai"})
    initialized(bridge, conn, ["anthropic", "openai", "gemini"])
    calls, call = asks_for_auth_once()
    assert await bridge.session._authenticated("session/new", call) == "opened"
    assert (conn.tried, calls[0]) == (["anthropic", "openai"], 2)


async def test_a_session_call_fails_naming_each_refused_key(bridge: AgentBridge) -> None:
    conn = KeyAgent(accepts=set())
    initialized(bridge, conn, ["anthropic", "openai"])
    calls, call = asks_for_auth_once()
    with pytest.raises(ApiError) as refused:
        await bridge.session._authenticated("session/load", call)
    assert (refused.value.status, refused.value.code) == (502, "agent_auth_required")
    assert "before session/load" in refused.value.message
    assert "anthropic: agent rejected authenticate: no key for anthropic" in refused.value.message
    assert "; openai: agent rejected authenticate: no key for openai" in refused.value.message
    assert calls[0] == 1


async def test_without_key_methods_the_agents_refusal_is_the_answer(bridge: AgentBridge) -> None:
    conn = KeyAgent(accepts={"openai"})
    initialized(bridge, conn, [])
    _, call = asks_for_auth_once()
    with pytest.raises(ApiError) as refused:
        await bridge.session._authenticated("session/new", call)
    assert refused.value.details["agent_error_code"] == AUTH_REQUIRED
    assert conn.tried == []


# ----- the lifecycle's one retry loop -----


async def test_the_retry_loop_tries_until_an_attempt_holds(
    bridge: AgentBridge, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(lifecycle, "REATTACH_DELAY", 0)
    attempts: list[int] = []

    async def attempt() -> None:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise ApiError(503, "agent_unavailable", f"try {len(attempts)}")

    with caplog.at_level(logging.WARNING, logger="agentsession.agentctl.acp_bridge"):
        await asyncio.wait_for(bridge.lifecycle._keep_trying(lambda: True, attempt, "failed: %s"), WAIT)
    assert attempts == [0, 1, 2]
    assert [r.getMessage() for r in caplog.records] == ["failed: try 1", "failed: try 2"]


async def test_the_retry_loop_stops_when_no_longer_wanted(
    bridge: AgentBridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "REATTACH_DELAY", 0)
    attempts: list[int] = []

    async def attempt() -> None:
        attempts.append(1)
        raise ApiError(503, "agent_unavailable", "no agent")

    await asyncio.wait_for(bridge.lifecycle._keep_trying(lambda: len(attempts) < 2, attempt, "%s"), WAIT)
    assert len(attempts) == 2
    await bridge.lifecycle._keep_trying(lambda: False, attempt, "%s")
    assert len(attempts) == 2


async def test_the_retry_loop_lets_go_of_pipes_nobody_answered(
    bridge: AgentBridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "REATTACH_DELAY", 0)
    detached: list[bool] = []

    async def detach(*, stop_agent: bool) -> None:
        detached.append(stop_agent)

    monkeypatch.setattr(bridge.transport, "detach", detach)
    closed = asyncio.Event()

    class Pipes:
        async def close(self) -> None:
            closed.set()

    for phase in (Phase.ATTACHING, Phase.CONNECTED, Phase.UNANSWERED):
        bridge.phases.move(phase)
    bridge.attachment.conn = Pipes()  # type: ignore[assignment]
    tries: list[Phase] = []

    async def attempt() -> None:
        tries.append(bridge.phase)
        if len(tries) == 1:
            raise ApiError(504, "agent_timeout", "agent did not answer initialize in time")

    await asyncio.wait_for(bridge.lifecycle._keep_trying(lambda: True, attempt, "%s"), WAIT)
    assert tries == [Phase.UNANSWERED, Phase.FAILED]
    assert closed.is_set()
    assert detached == [False], "the agent is left running: it may answer the next attempt"
    assert bridge.attachment.conn is None
