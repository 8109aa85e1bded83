"""The agent bridge's phases: which moves the table allows, that the bridge refuses the others, and the state
`GET /api/v1/status` derives from the phase."""

from __future__ import annotations

import typing
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsession.agentctl.acp_bridge import AgentBridge
from agentsession.agentctl.bridge.phases import (
    ACP_INITIALIZED,
    ATTACHED,
    IN_SESSION,
    REPORTED_STATE,
    TRANSITIONS,
    IllegalTransition,
    Phase,
)
from agentsession.agentctl.errors import ApiError
from agentsession.contract.wire import AgentState
from tests.support.agentctl_bridge import unit_bridge

P = Phase

LIFECYCLES = {
    "start, prompt twice, stop": [
        *(P.STOPPED, P.ATTACHING, P.CONNECTED, P.INITIALIZED, P.SESSION),
        *(P.TURN, P.SESSION, P.TURN, P.SESSION, P.STOPPING, P.STOPPED),
    ],
    "session/load replaces the session": [
        *(P.STOPPED, P.ATTACHING, P.CONNECTED, P.INITIALIZED, P.SESSION, P.SESSION, P.TURN),
    ],
    "the agent dies in a turn; a start resumes": [
        *(P.STOPPED, P.ATTACHING, P.CONNECTED, P.INITIALIZED, P.SESSION, P.TURN),
        *(P.EXITED, P.FAILED, P.ATTACHING, P.CONNECTED, P.INITIALIZED, P.SESSION),
    ],
    "the agent dies before initialize": [P.STOPPED, P.ATTACHING, P.CONNECTED, P.EXITED, P.FAILED],
    "attach times out, the next works": [P.STOPPED, P.ATTACHING, P.FAILED, P.ATTACHING, P.CONNECTED],
    "initialize fails, then succeeds": [P.STOPPED, P.ATTACHING, P.CONNECTED, P.UNANSWERED, P.INITIALIZED],
    "pipes nobody answers are let go": [
        *(P.STOPPED, P.ATTACHING, P.CONNECTED, P.UNANSWERED, P.FAILED, P.ATTACHING),
    ],
    "stop while the exit is learned": [
        *(P.STOPPED, P.ATTACHING, P.CONNECTED, P.INITIALIZED, P.EXITED, P.STOPPING, P.STOPPED),
    ],
    "stop while attaching": [P.STOPPED, P.ATTACHING, P.STOPPING, P.STOPPED],
    "stop when stopped": [P.STOPPED, P.STOPPING, P.STOPPED],
}

ILLEGAL = {
    "a second turn": (P.TURN, P.TURN),
    "a turn before a session": (P.INITIALIZED, P.TURN),
    "a turn without an agent": (P.STOPPED, P.TURN),
    "a session before initialize": (P.CONNECTED, P.SESSION),
    "an answer after the agent exited": (P.EXITED, P.SESSION),
    "an answer after the exit was recorded": (P.FAILED, P.INITIALIZED),
    "two attaches at once": (P.ATTACHING, P.ATTACHING),
    "attach before the exit is recorded": (P.EXITED, P.ATTACHING),
    "attach during a stop": (P.STOPPING, P.ATTACHING),
    "pipes opened after a stop": (P.STOPPED, P.CONNECTED),
    "stopped without stopping": (P.SESSION, P.STOPPED),
    "a stop inside a stop": (P.STOPPING, P.STOPPING),
    "an exit with nothing attached": (P.FAILED, P.EXITED),
}

# The wire contract: (state, acp.initialized, acp.turn_running) of GET /api/v1/status in each phase.
REPORTED = {
    P.STOPPED: ("stopped", False, False),
    P.ATTACHING: ("starting", False, False),
    P.CONNECTED: ("starting", False, False),
    P.UNANSWERED: ("error", False, False),
    P.INITIALIZED: ("running", True, False),
    P.SESSION: ("running", True, False),
    P.TURN: ("running", True, True),
    P.EXITED: ("error", False, False),
    P.FAILED: ("error", False, False),
    P.STOPPING: ("stopping", False, False),
}


def path_to(target: Phase) -> list[Phase]:
    """The shortest legal path from STOPPED to `target`."""
    paths = {P.STOPPED: [P.STOPPED]}
    queue = deque([P.STOPPED])
    while queue:
        phase = queue.popleft()
        for after in sorted(TRANSITIONS[phase], key=lambda p: p.value):
            if after not in paths:
                paths[after] = [*paths[phase], after]
                queue.append(after)
    return paths[target]


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[AgentBridge]:
    with unit_bridge(tmp_path) as made:
        yield made


def walk(bridge: AgentBridge, path: list[Phase]) -> None:
    assert bridge.phase is path[0]
    for phase in path[1:]:
        bridge.phases.move(phase)
        assert bridge.phase is phase


def test_every_phase_has_its_moves_and_a_reported_state() -> None:
    assert set(TRANSITIONS) == set(Phase)
    assert set(REPORTED_STATE) == set(Phase)
    assert set(REPORTED_STATE.values()) == set(typing.get_args(AgentState))


def test_every_phase_is_reachable_and_can_be_stopped() -> None:
    for phase in Phase:
        assert path_to(phase)[-1] is phase
        if phase is not P.STOPPING:
            assert P.STOPPING in TRANSITIONS[phase], phase
    assert TRANSITIONS[P.STOPPING] == {P.STOPPED}


def test_the_phase_groups_follow_the_table() -> None:
    # An agent can only exit while attached, and what is attached can exit.
    assert {p for p in Phase if P.EXITED in TRANSITIONS[p]} == ATTACHED
    assert IN_SESSION < ACP_INITIALIZED < ATTACHED
    assert {p for p in Phase if P.TURN in TRANSITIONS[p]} == {P.SESSION}


@pytest.mark.parametrize("path", LIFECYCLES.values(), ids=LIFECYCLES.keys())
def test_lifecycles_are_legal(bridge: AgentBridge, path: list[Phase]) -> None:
    walk(bridge, path)


@pytest.mark.parametrize(("current", "target"), ILLEGAL.values(), ids=ILLEGAL.keys())
def test_illegal_moves_are_refused_with_a_409_naming_them(
    bridge: AgentBridge, current: Phase, target: Phase
) -> None:
    assert target not in TRANSITIONS[current]
    walk(bridge, path_to(current))
    with pytest.raises(IllegalTransition) as refused:
        bridge.phases.move(target)
    assert (refused.value.status, refused.value.code) == (409, "conflict")
    assert refused.value.message == f"the agent cannot go from {current.value} to {target.value}"
    assert bridge.phase is current


def test_the_bridge_refuses_every_move_the_table_lacks(bridge: AgentBridge) -> None:
    for current in Phase:
        for target in set(Phase) - TRANSITIONS[current]:
            bridge.phases._phase = current
            with pytest.raises(IllegalTransition):
                bridge.phases.move(target)
            assert bridge.phase is current


@pytest.mark.parametrize("phase", list(Phase), ids=[p.value for p in Phase])
def test_status_is_derived_from_the_phase(bridge: AgentBridge, phase: Phase) -> None:
    bridge.acp.turn_started_at = "2026-01-01T00:00:00.000Z"
    walk(bridge, path_to(phase))
    status = bridge.status()
    assert (status["state"], status["acp"]["initialized"], status["acp"]["turn_running"]) == REPORTED[phase]
    state, _, turn_running = REPORTED[phase]
    assert bridge.state == state
    assert bridge.turn_running is turn_running
    assert status["acp"]["turn_started_at"] == ("2026-01-01T00:00:00.000Z" if turn_running else None)


@pytest.mark.parametrize(
    "phase", [p for p in Phase if p not in ATTACHED], ids=[p.value for p in Phase if p not in ATTACHED]
)
def test_requests_without_an_attached_agent_name_the_reported_state(
    bridge: AgentBridge, phase: Phase
) -> None:
    walk(bridge, path_to(phase))
    bridge.errors.last_error = "agent exited: code 3"
    with pytest.raises(ApiError) as refused:
        bridge.begin_turn("hello")
    assert refused.value.status == 409
    assert (
        f"not attached (state {REPORTED_STATE[phase]}, last error: agent exited: code 3)"
        in refused.value.message
    )
    assert bridge.phase is phase
