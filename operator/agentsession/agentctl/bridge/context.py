"""What the parts of the bridge share: agentctl's services they use, and the bridge's one phase machine, ACP state,
error record and task supervisor. The front (`acp_bridge.AgentBridge`) makes one and hands it to each part."""

from __future__ import annotations

from dataclasses import dataclass

from agentsession.agentctl.bridge.acp_state import AcpState
from agentsession.agentctl.bridge.agent_errors import AgentErrors
from agentsession.agentctl.bridge.phases import PhaseMachine
from agentsession.agentctl.config import Config
from agentsession.agentctl.events import EventHub
from agentsession.agentctl.metrics import Metrics
from agentsession.agentctl.permissions import PermissionBroker
from agentsession.agentctl.session_store import SessionStore
from agentsession.agentctl.transport import AgentTransport
from agentsession.tasks import Supervisor


@dataclass(frozen=True, eq=False)
class BridgeContext:
    config: Config
    transport: AgentTransport
    hub: EventHub
    permissions: PermissionBroker
    metrics: Metrics
    store: SessionStore
    phases: PhaseMachine
    acp: AcpState
    errors: AgentErrors
    tasks: Supervisor
