"""The event model both wire dialects encode: what happened to an agent, independent of any protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentsession.gateway.replies import Answer


@dataclass(frozen=True)
class AgentStatusChanged:
    agent_id: str
    info: dict[str, Any]
    # monotonic time the cause was observed (watch event or upstream frame), for delivery latency.
    observed_at: float = 0.0
    # `status.cluster_state`: the phase and conditions behind `info["status"]`.
    cluster: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentRemoved:
    agent_id: str
    info: dict[str, Any]
    observed_at: float = 0.0


@dataclass(frozen=True)
class AgentctlReady:
    agent_id: str
    task_session_id: str | None
    observed_at: float = 0.0


@dataclass(frozen=True)
class AgentUpdate:
    """One agentctl journal entry: `kind` is session_update, permission_request, permission_resolved, …"""

    agent_id: str
    seq: int
    timestamp: str
    kind: str
    notification: dict[str, Any]
    observed_at: float = 0.0


@dataclass(frozen=True)
class ShellOutput:
    agent_id: str
    type: str  # "output" or "exit"
    data: str = ""
    code: int | None = None
    observed_at: float = 0.0


@dataclass(frozen=True)
class Reply:
    """The answer to one client request; `action` names the request, `body` is dialect-neutral."""

    action: str
    body: Answer
    request_id: str | None = None
    envelope_id: str | None = None


@dataclass(frozen=True)
class HistoryPage:
    """A page of an agent's history after the first (which the answer to its initialize carries), for the request
    `action`: more follow while `next` is set, then that agent's live updates."""

    action: str
    agent_id: str
    updates: list[dict[str, Any]]  # journal entries
    next: int | None
    request_id: str | None = None
    envelope_id: str | None = None


@dataclass(frozen=True)
class Failure:
    """A request that failed: `code` is one of ErrorCode; the dialect maps it to its own spelling."""

    code: str
    message: str
    action: str | None = None
    request_id: str | None = None
    envelope_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


Event = (
    AgentStatusChanged
    | AgentRemoved
    | AgentctlReady
    | AgentUpdate
    | ShellOutput
    | Reply
    | HistoryPage
    | Failure
)


class ErrorCode:
    BAD_REQUEST = "bad_request"
    INVALID_JSON = "invalid_json"
    UNKNOWN_ACTION = "unknown_action"
    VALIDATION_ERROR = "validation_error"
    NOT_FOUND = "not_found"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    CONFLICT = "conflict"
    TIMEOUT = "timeout"
    AGENTCTL_NOT_READY = "agentctl_not_ready"
    BUDGET_EXHAUSTED = "budget_exhausted"
    UPSTREAM_ERROR = "upstream_error"
    SLOW_CONSUMER = "slow_consumer"
    TOO_MANY_REQUESTS = "too_many_requests"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    INTERNAL_ERROR = "internal_error"


class RequestError(Exception):
    """Raised by request handlers; the connection turns it into a Failure for the client."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
