"""The ACP client side: drives the agent through the SDK's ClientSideConnection and tracks its state.

One bridge per agentctl. `AgentBridge` is its front: it builds the parts of `agentctl.bridge`, each with one job
(the phase machine, the attachment, the ACP session, message intake, turns, the lifecycle), wires them together,
and offers the routes, the drain and the probes one object. Agent messages are journaled in arrival order; the
agent's process state and ACP state (session, modes, running turn) are kept for `GET /api/v1/status`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from acp import PROTOCOL_VERSION

from agentsession.agentctl.bridge import log
from agentsession.agentctl.bridge.acp_session import AcpSession
from agentsession.agentctl.bridge.acp_state import AcpState
from agentsession.agentctl.bridge.agent_errors import AgentErrors
from agentsession.agentctl.bridge.agent_requests import BridgeClient
from agentsession.agentctl.bridge.attachment import Attachment
from agentsession.agentctl.bridge.context import BridgeContext
from agentsession.agentctl.bridge.intake import MessageIntake
from agentsession.agentctl.bridge.lifecycle import CONFIGURED_WAIT, Lifecycle
from agentsession.agentctl.bridge.phases import Phase, PhaseMachine
from agentsession.agentctl.bridge.turns import Prompt, Turns
from agentsession.agentctl.config import Config
from agentsession.agentctl.events import EventHub
from agentsession.agentctl.metrics import Metrics
from agentsession.agentctl.permissions import PermissionBroker
from agentsession.agentctl.session_store import SessionStore
from agentsession.agentctl.transport import AgentTransport
from agentsession.contract.wire import AgentState, StartRequest, StartResponse
from agentsession.tasks import Supervisor


class AgentBridge:
    def __init__(
        self,
        config: Config,
        transport: AgentTransport,
        hub: EventHub,
        permissions: PermissionBroker,
        metrics: Metrics,
        store: SessionStore,
    ) -> None:
        self.transport = transport
        self.permissions = permissions
        self.phases = PhaseMachine()
        self.acp = AcpState()
        self.errors = AgentErrors(hub, metrics, lambda: self.acp.session_id)
        self._tasks = Supervisor("agentctl", log)
        ctx = BridgeContext(
            config,
            transport,
            hub,
            permissions,
            metrics,
            store,
            self.phases,
            self.acp,
            self.errors,
            self._tasks,
        )
        intake = MessageIntake(self.acp, store, hub, metrics, self.errors)

        async def after_exit(reason: str, turn_was_running: bool, lost: str | None) -> None:
            await self.lifecycle.after_exit(reason, turn_was_running, lost)

        self.attachment = Attachment(ctx, intake, BridgeClient(permissions, self.errors), after_exit)
        self.session = AcpSession(ctx, self.attachment, intake)
        self.turns = Turns(ctx, self.attachment, self.session, intake)
        self.lifecycle = Lifecycle(ctx, self.attachment, self.session, self.turns)

    # ----- state -----

    @property
    def phase(self) -> Phase:
        return self.phases.phase

    @property
    def state(self) -> AgentState:
        return self.phases.state

    @property
    def turn_running(self) -> bool:
        return self.phases.turn_running

    @property
    def current_turn(self) -> asyncio.Task[str] | None:
        """The running turn's task (its result is the stop reason), or None."""
        return self.turns.current

    @property
    def stopping(self) -> bool:
        """Set by a drain: the pod is stopping, so no new turn may begin; a start clears it."""
        return self.turns.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self.turns.stopping = value

    async def wait_initialized(self, wait_s: float) -> bool:
        """Whether the agent has answered ACP initialize, waiting up to `wait_s` for it."""
        return await self.phases.wait_initialized(wait_s)

    def status(self) -> dict[str, Any]:
        a = self.acp
        return {
            "state": self.state,
            "last_error": self.errors.last_error,
            "last_error_at": self.errors.last_error_at,
            "pid": self.attachment.pid,
            "attachments": self.attachment.count,
            **self.transport.describe(),
            "acp": {
                "initialized": self.phases.initialized,
                "protocol_version": a.protocol_version,
                "agent_info": a.agent_info,
                "load_session": a.load_session,
                "session_id": a.session_id,
                "cwd": a.cwd,
                "current_mode_id": a.current_mode_id,
                "available_modes": a.available_modes,
                "turn_running": self.turn_running,
                "turn_started_at": a.turn_started_at if self.turn_running else None,
                "last_stop_reason": a.last_stop_reason,
            },
        }

    # ----- ACP operations (the routes under /api/v1/acp) -----

    async def initialize(self, protocol_version: int = PROTOCOL_VERSION) -> dict[str, Any]:
        return await self.session.initialize(protocol_version)

    async def new_session(self, cwd: str | None) -> dict[str, Any]:
        return await self.session.new_session(cwd)

    async def load_session(self, session_id: str, cwd: str | None) -> dict[str, Any]:
        return await self.session.load_session(session_id, cwd)

    def begin_turn(self, prompt: Prompt, session_id: str | None = None) -> asyncio.Task[str]:
        return self.turns.begin(prompt, session_id)

    async def cancel(self, session_id: str | None) -> bool:
        return await self.turns.cancel(session_id)

    async def set_mode(self, mode_id: str, session_id: str | None) -> str:
        return await self.session.set_mode(mode_id, session_id)

    # ----- the operator's entry points, and the pod's agent -----

    async def start(self, req: StartRequest, attach_wait_s: float | None = CONFIGURED_WAIT) -> StartResponse:
        return await self.lifecycle.start(req, attach_wait_s)

    async def stop(self) -> None:
        await self.lifecycle.stop()

    def prepare_in_background(self) -> None:
        self.lifecycle.prepare_in_background()

    async def shutdown(self) -> None:
        await self.lifecycle.stop()
        await self._tasks.close()
