"""The `agent-lifecycle.v1` dialect: `session_state`, `initialize_agent_request` → `agent_initialized`, and the
`agent_status` / `agent_update` / permission messages. Agent ids are `namespace/name`.
"""

from __future__ import annotations

from typing import Any

from agentsession.gateway import commands as c
from agentsession.gateway import replies as r
from agentsession.gateway.codec import Frame, command_args, parse_object
from agentsession.gateway.commands import Command
from agentsession.gateway.events import (
    AgentctlReady,
    AgentRemoved,
    AgentStatusChanged,
    AgentUpdate,
    ErrorCode,
    Event,
    Failure,
    HistoryPage,
    Reply,
    ShellOutput,
)

SUBPROTOCOL = "agent-lifecycle.v1"

# Inbound type → (command action, required string fields, optional string fields)
INBOUND: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "initialize_agent_request": (c.INITIALIZE, ("agentId",), ()),
    "send_agent_message": (c.PROMPT, ("agentId", "text"), ()),
    "set_agent_mode": (c.SET_MODE, ("agentId", "modeId"), ()),
    "cancel_agent_turn": (c.CANCEL, ("agentId",), ()),
    "suspend_agent": (c.SUSPEND, ("agentId",), ()),
    "agent_permission_response": (c.PERMISSION_RESPONSE, ("agentId", "permissionId"), ("optionId",)),
    "list_agents": (c.LIST, (), ()),
    "ping": (c.PING, (), ()),
}
_WIRE_TYPES = {action: kind for kind, (action, _, _) in INBOUND.items()}


class LifecycleCodec:
    name = SUBPROTOCOL

    def decode(self, text: str) -> Command | Failure:
        data = parse_object(text)
        if isinstance(data, Failure):
            return data
        # Fields may sit at the top level (as in the protocol) or inside "payload"; the top level wins.
        payload = data.get("payload")
        fields: dict[str, Any] = {**(payload if isinstance(payload, dict) else {}), **data}
        request_id = fields.get("requestId")
        if request_id is not None and not isinstance(request_id, str | int):
            return Failure(ErrorCode.VALIDATION_ERROR, "requestId must be a string or a number")
        rid = None if request_id is None else str(request_id)
        kind = data.get("type")
        if not isinstance(kind, str):
            return Failure(ErrorCode.BAD_REQUEST, 'messages need a string "type"', request_id=rid)
        spec = INBOUND.get(kind)
        if spec is None:
            known = ", ".join(sorted(INBOUND))
            return Failure(
                ErrorCode.UNKNOWN_ACTION, f"unknown message type {kind!r}; known: {known}", kind, rid
            )
        action, required, optional = spec
        try:
            answer = "optionId" if action == c.PERMISSION_RESPONSE else None
            args = command_args(fields, required, optional, answer_field=answer)
        except ValueError as exc:
            return Failure(ErrorCode.VALIDATION_ERROR, str(exc), kind, rid)
        return Command(action, args.pop("agentId", None), args, rid)

    def encode(self, event: Event) -> Frame | None:
        if isinstance(event, AgentStatusChanged | AgentRemoved):
            info = event.info
            status: dict[str, Any] = {"agentId": event.agent_id, "status": info["status"], "info": info}
            if isinstance(event, AgentStatusChanged):
                status["cluster"] = event.cluster
            return {"type": "agent_status", "payload": status}
        if isinstance(event, AgentUpdate):
            return _update(event)
        if isinstance(event, Reply):
            return _reply(event)
        if isinstance(event, HistoryPage):
            return {
                "type": "agent_history",
                "payload": {
                    "agentId": event.agent_id,
                    "requestId": event.request_id,
                    "updates": _history(event.agent_id, event.updates),
                    "next": event.next,
                },
            }
        if isinstance(event, Failure):
            payload: dict[str, Any] = {
                "code": event.code,
                "message": event.message,
                "requestId": event.request_id,
            }
            if event.action:
                payload["requestType"] = _WIRE_TYPES.get(event.action, event.action)
            if event.details:
                payload["details"] = event.details
            return {"type": "error", "payload": payload}
        if isinstance(event, AgentctlReady | ShellOutput):
            return None
        return None

    def hello(self, agents: list[dict[str, Any]], cluster: dict[str, dict[str, Any]]) -> Frame | None:
        return {"type": "session_state", "payload": {"agents": agents, "cluster": cluster}}

    def needs_subscription(self, event: Event) -> bool:
        return isinstance(event, AgentUpdate)


def update_entry(agent_id: str, timestamp: str, notification: dict[str, Any]) -> dict[str, Any]:
    return {"agentId": agent_id, "timestamp": timestamp, "notification": notification}


def _history(agent_id: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The journal entries this dialect shows in a history: the ACP session updates."""
    return [
        update_entry(agent_id, u["timestamp"], u["notification"])
        for u in entries
        if u.get("kind") == "session_update"
    ]


def _update(event: AgentUpdate) -> Frame | None:
    n = event.notification
    if event.kind == "session_update":
        return {"type": "agent_update", "payload": update_entry(event.agent_id, event.timestamp, n)}
    if event.kind == "permission_request":
        return {"type": "agent_permission_request", "payload": permission_request(event.agent_id, n)}
    if event.kind == "permission_resolved":
        return {
            "type": "agent_permission_resolved",
            "payload": {
                "agentId": event.agent_id,
                "permissionId": n.get("pending_id"),
                "outcome": n.get("outcome"),
                "reason": n.get("reason"),
            },
        }
    return None


def permission_request(agent_id: str, pending: dict[str, Any]) -> dict[str, Any]:
    return {
        "agentId": agent_id,
        "permissionId": pending.get("pending_id"),
        "sessionId": pending.get("session_id"),
        "toolCall": pending.get("tool_call"),
        "options": pending.get("options"),
        "createdAt": pending.get("created_at"),
        "expiresAt": pending.get("expires_at"),
    }


def agent_answer(body: r.Answer) -> dict[str, Any]:
    """What a command on an agent answers, in this dialect's field names (which task-session.v1 uses too)."""
    match body:
        case r.Prompted():
            return {"agentId": body.agent_id, "accepted": True, "sessionId": body.session_id}
        case r.ModeSet():
            return {"agentId": body.agent_id, "currentModeId": body.current_mode_id}
        case r.Cancelled():
            return {"agentId": body.agent_id, "turnRunning": body.turn_running}
        case r.Suspended():
            return {"agentId": body.agent_id, "suspended": True}
        case r.PermissionAnswered():
            return {"agentId": body.agent_id, "permissionId": body.permission_id, "outcome": body.outcome}
    return {}


def _reply(reply: Reply) -> Frame:
    body = reply.body
    match body:
        case r.Initialized():
            payload = {"agentId": body.agent_id, "info": body.info, "updates": _history(body.agent_id, body.updates),
                       "next": body.next, "requestId": reply.request_id}  # fmt: skip
            return {"type": "agent_initialized", "payload": payload}
        case r.AgentList():
            payload = {"agents": body.agents, "cluster": body.cluster, "requestId": reply.request_id}
            return {"type": "session_state", "payload": payload}
        case r.Pong():
            return {"type": "pong", "payload": {"requestId": reply.request_id}}
    return {
        "type": "ack",
        "payload": {
            "requestType": _WIRE_TYPES.get(reply.action, reply.action),
            "requestId": reply.request_id,
            **agent_answer(body),
        },
    }
