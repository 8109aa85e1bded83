"""Where the bridge is with its agent: one `Phase`, moved only along `TRANSITIONS`.

Separate flags (a connection set, initialized, a session id, a turn task, a stop requested) can disagree in the
races between an agent's exit, a stop and a new start; one phase cannot, and a request that comes at the wrong
moment gets a 409 naming the move instead of acting on a half-torn-down attachment. Pure: no ACP, no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum

from agentsession.agentctl.bridge import log
from agentsession.agentctl.errors import ApiError
from agentsession.contract.wire import AgentState


class Phase(enum.Enum):
    STOPPED = "stopped"  # nothing attached, as asked (or not started yet)
    ATTACHING = "attaching"  # the transport is connecting an agent
    CONNECTED = "connected"  # pipes open; the agent has not answered initialize yet
    UNANSWERED = "unanswered"  # pipes open; initialize failed: initialize again, or let the pipes go
    INITIALIZED = "initialized"  # initialize answered; no ACP session yet
    SESSION = "session"  # an ACP session is current; no turn running
    TURN = "turn"  # a prompt turn is running
    EXITED = "exited"  # the agent's output ended without agentctl asking; how it ended is being learned
    FAILED = "failed"  # nothing attached: attaching failed, the agent exited, or agentctl let go of it
    STOPPING = "stopping"  # agentctl is stopping the agent


TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.STOPPED: frozenset({Phase.ATTACHING, Phase.STOPPING}),
    Phase.FAILED: frozenset({Phase.ATTACHING, Phase.STOPPING}),
    Phase.ATTACHING: frozenset({Phase.CONNECTED, Phase.FAILED, Phase.STOPPING}),
    Phase.CONNECTED: frozenset(
        {Phase.INITIALIZED, Phase.UNANSWERED, Phase.EXITED, Phase.FAILED, Phase.STOPPING}
    ),
    Phase.UNANSWERED: frozenset({Phase.INITIALIZED, Phase.EXITED, Phase.FAILED, Phase.STOPPING}),
    Phase.INITIALIZED: frozenset({Phase.SESSION, Phase.EXITED, Phase.STOPPING}),
    # SESSION -> SESSION: session/new or session/load replaces the current session.
    Phase.SESSION: frozenset({Phase.SESSION, Phase.TURN, Phase.EXITED, Phase.STOPPING}),
    Phase.TURN: frozenset({Phase.SESSION, Phase.EXITED, Phase.STOPPING}),
    Phase.EXITED: frozenset({Phase.FAILED, Phase.STOPPING}),
    Phase.STOPPING: frozenset({Phase.STOPPED}),
}
ATTACHED = frozenset({Phase.CONNECTED, Phase.UNANSWERED, Phase.INITIALIZED, Phase.SESSION, Phase.TURN})
ACP_INITIALIZED = frozenset({Phase.INITIALIZED, Phase.SESSION, Phase.TURN})
IN_SESSION = frozenset({Phase.SESSION, Phase.TURN})
# The `state` of `GET /api/v1/status`, a contract with the operator: coarser than the phases.
REPORTED_STATE: dict[Phase, AgentState] = {
    Phase.STOPPED: "stopped",
    Phase.ATTACHING: "starting",
    Phase.CONNECTED: "starting",
    Phase.UNANSWERED: "error",
    Phase.INITIALIZED: "running",
    Phase.SESSION: "running",
    Phase.TURN: "running",
    Phase.EXITED: "error",
    Phase.FAILED: "error",
    Phase.STOPPING: "stopping",
}


class IllegalTransition(ApiError):
    """A move `TRANSITIONS` does not allow: a request racing an exit, a stop or another request, or a bug."""

    def __init__(self, current: Phase, target: Phase) -> None:
        super().__init__(409, "conflict", f"the agent cannot go from {current.value} to {target.value}")


class PhaseMachine:
    """The bridge's one phase, and an event set while the agent has answered initialize."""

    def __init__(self) -> None:
        self._phase = Phase.STOPPED
        self._initialized = asyncio.Event()

    @property
    def phase(self) -> Phase:
        return self._phase

    def move(self, target: Phase) -> None:
        if target not in TRANSITIONS[self._phase]:
            raise IllegalTransition(self._phase, target)
        log.debug("agent phase %s -> %s", self._phase.value, target.value)
        self._phase = target
        if target in ACP_INITIALIZED:
            self._initialized.set()
        else:
            self._initialized.clear()

    async def wait_initialized(self, wait_s: float) -> bool:
        """Whether the agent has answered ACP initialize, waiting up to `wait_s` for it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._initialized.wait(), wait_s)
        return self._initialized.is_set()

    @property
    def state(self) -> AgentState:
        return REPORTED_STATE[self._phase]

    @property
    def initialized(self) -> bool:
        return self._phase in ACP_INITIALIZED

    @property
    def turn_running(self) -> bool:
        return self._phase is Phase.TURN
