"""What the agent may ask of agentctl: the `acp.Client` side of the connection.

agentctl answers permission requests (through the permission broker, where a person decides) and offers no file
system or terminals; the SDK answers the rest as not found. Elicitation, terminals and file system calls, once
agentctl offers them, get their handler here.
"""

from __future__ import annotations

from typing import Any

from acp import RequestError
from acp.schema import PermissionOption, RequestPermissionResponse, ToolCallUpdate

from agentsession.agentctl.bridge.acp_state import dump
from agentsession.agentctl.bridge.agent_errors import AgentErrors
from agentsession.agentctl.permissions import CANCELLED, PermissionBroker, TooManyPending


class BridgeClient:
    """The `acp.Client` agentctl offers the agent: permissions and updates, no file system or terminals."""

    def __init__(self, permissions: PermissionBroker, errors: AgentErrors) -> None:
        self._permissions = permissions
        self._errors = errors

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        try:
            outcome = await self._permissions.request(session_id, dump(tool_call), [dump(o) for o in options])
        except TooManyPending as exc:
            # Something the agent asked for that agentctl refused.
            self._errors.record(str(exc), "agent_protocol")
            outcome = CANCELLED
        return RequestPermissionResponse.model_validate({"outcome": outcome})

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None
