"""The `task-session.v1` dialect: a request/response/notification envelope with action names.

Envelope: `{"id", "type": "request|response|notification|error", "action", "payload", "timestamp"}`; errors carry
`{"code", "message", "details"}`. A task is an AgentSession; `task_id` is `namespace/name`, and
`task_session_id` is the UID of the pod that currently runs it (one execution of the task).
"""

from __future__ import annotations

import uuid
from typing import Any

from agentsession.api.times import utc_now
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
from agentsession.gateway.lifecycle_dialect import agent_answer

SUBPROTOCOL = "task-session.v1"

# action → (command, required string fields, optional string fields)
ACTIONS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "task.list": (c.LIST, (), ()),
    "task.subscribe": (c.SUBSCRIBE, ("task_id",), ()),
    "task.unsubscribe": ("unsubscribe", ("task_id",), ()),
    "task.start": (c.INITIALIZE, ("task_id",), ()),
    "session.prompt": (c.PROMPT, ("task_id", "text"), ()),
    "session.set_mode": (c.SET_MODE, ("task_id", "mode_id"), ()),
    "session.cancel": (c.CANCEL, ("task_id",), ()),
    "task.suspend": (c.SUSPEND, ("task_id",), ()),
    "permission.respond": (c.PERMISSION_RESPONSE, ("task_id", "pending_id"), ("option_id",)),
    "shell.status": (c.SHELL_STATUS, ("task_id",), ()),
    "shell.subscribe": (c.SHELL_SUBSCRIBE, ("task_id",), ()),
    "shell.unsubscribe": (c.SHELL_UNSUBSCRIBE, ("task_id",), ()),
    "shell.input": (c.SHELL_INPUT, ("task_id", "data"), ()),
    "ping": (c.PING, (), ()),
}
_WIRE_ACTIONS = {command: action for action, (command, _, _) in ACTIONS.items()}
# Field names of the core commands, spelled the way this dialect spells them.
_ARG_NAMES = {
    "text": "text",
    "mode_id": "modeId",
    "pending_id": "permissionId",
    "option_id": "optionId",
    "data": "data",
}
_CODES = {ErrorCode.INVALID_JSON: "BAD_REQUEST"}


def now() -> str:
    return utc_now("milliseconds")


def envelope(kind: str, action: str, payload: dict[str, Any], msg_id: str | None = None) -> Frame:
    return {
        # An empty id is still the client's id: its answer must carry it back.
        "id": uuid.uuid4().hex if msg_id is None else msg_id,
        "type": kind,
        "action": action,
        "payload": payload,
        "timestamp": now(),
    }


def _answer(body: r.Answer) -> dict[str, Any]:
    match body:
        case r.Pong():
            return {}
        case r.AgentList():
            return {"agents": body.agents, "cluster": body.cluster}
        case r.Initialized():
            return {"agentId": body.agent_id, "info": body.info, "updates": body.updates, "next": body.next}
        case r.Subscribed():
            return {"success": True, "task_id": body.agent_id, "status": body.status,
                    "agentctl_ready": body.agentctl_ready}  # fmt: skip
        case r.Done():
            return {"success": True, "task_id": body.agent_id}
        case r.ShellState():
            return {"task_id": body.agent_id, "agentctl_ready": body.agentctl_ready, "running": body.running,
                    "cwd": body.cwd, "exit_code": body.exit_code}  # fmt: skip
        case r.ShellSubscribed():
            return {"success": True, "task_id": body.agent_id, "buffer": body.buffer}
    # The agent's commands are answered in agent-lifecycle.v1's field names, as this dialect always has.
    return agent_answer(body)


class TaskCodec:
    name = SUBPROTOCOL

    def decode(self, text: str) -> Command | Failure:
        data = parse_object(text)
        if isinstance(data, Failure):
            return data
        msg_id = data.get("id")
        if msg_id is not None and not isinstance(msg_id, str | int):
            return Failure(ErrorCode.VALIDATION_ERROR, "id must be a string or a number")
        mid = None if msg_id is None else str(msg_id)
        action = data.get("action")
        if not isinstance(action, str):
            return Failure(ErrorCode.BAD_REQUEST, 'messages need a string "action"', envelope_id=mid)
        if data.get("type", "request") != "request":
            return Failure(
                ErrorCode.BAD_REQUEST, 'clients send messages of type "request"', action, envelope_id=mid
            )
        spec = ACTIONS.get(action)
        if spec is None:
            known = ", ".join(sorted(ACTIONS))
            return Failure(
                ErrorCode.UNKNOWN_ACTION,
                f"unknown action {action!r}; known: {known}",
                action,
                envelope_id=mid,
            )
        payload = data.get("payload", {})
        if not isinstance(payload, dict):
            return Failure(
                ErrorCode.VALIDATION_ERROR, "payload must be a JSON object", action, envelope_id=mid
            )
        command, required, optional = spec
        try:
            answer = "option_id" if command == c.PERMISSION_RESPONSE else None
            args = command_args(payload, required, optional, answer_field=answer)
        except ValueError as exc:
            return Failure(ErrorCode.VALIDATION_ERROR, str(exc), action, envelope_id=mid)
        task_id = args.pop("task_id", None)
        return Command(command, task_id, {_ARG_NAMES.get(k, k): v for k, v in args.items()}, envelope_id=mid)

    def encode(self, event: Event) -> Frame | None:
        if isinstance(event, AgentctlReady):
            return envelope(
                "notification",
                "task.session.agentctl_ready",
                {"task_id": event.agent_id, "task_session_id": event.task_session_id},
            )
        if isinstance(event, ShellOutput):
            return envelope(
                "notification",
                "shell.output",
                {"task_id": event.agent_id, "type": event.type, "data": event.data, "code": event.code},
            )
        if isinstance(event, AgentStatusChanged):
            return envelope(
                "notification",
                "task.status",
                {
                    "task_id": event.agent_id,
                    "status": event.info["status"],
                    "info": event.info,
                    "cluster": event.cluster,
                },
            )
        if isinstance(event, AgentRemoved):
            return envelope("notification", "task.deleted", {"task_id": event.agent_id})
        if isinstance(event, AgentUpdate):
            return envelope(
                "notification",
                "session.update",
                {
                    "task_id": event.agent_id,
                    "seq": event.seq,
                    "kind": event.kind,
                    "timestamp": event.timestamp,
                    "notification": event.notification,
                },
            )
        if isinstance(event, Reply):
            action = _WIRE_ACTIONS.get(event.action, event.action)
            return envelope("response", action, _answer(event.body), event.envelope_id)
        if isinstance(event, HistoryPage):
            return envelope(
                "notification",
                "task.history",
                {
                    "task_id": event.agent_id,
                    # The id of the request whose answer carried the first page.
                    "request_id": event.envelope_id,
                    "updates": event.updates,
                    "next": event.next,
                },
            )
        if isinstance(event, Failure):
            action = _WIRE_ACTIONS.get(event.action or "", event.action or "")
            return envelope(
                "error",
                action,
                {
                    "code": _CODES.get(event.code, event.code.upper()),
                    "message": event.message,
                    "details": event.details,
                },
                event.envelope_id,
            )
        return None

    def hello(self, agents: list[dict[str, Any]], cluster: dict[str, dict[str, Any]]) -> Frame | None:
        return None

    def needs_subscription(self, event: Event) -> bool:
        return isinstance(event, AgentctlReady | AgentStatusChanged | AgentUpdate | AgentRemoved)
