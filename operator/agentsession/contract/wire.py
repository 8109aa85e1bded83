"""The contract between the operator (and gateway) and agentctl: request and response bodies of its control API.

Both sides import these models, so the server and its clients cannot drift apart; the routes that take and
answer them are defined in `agentsession.contract.routes`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from agentsession.api.acp import (
    MODE_ID_MAX_CHARS,
    SESSION_ID_MAX_CHARS,
    AgentIdentity,
    CurrentModeId,
    Modes,
    SessionId,
)

AGENTCTL_PORT = 9999
HEALTH_PATH = "/health"
AGENT_HEALTH_PATH = "/health/agent"
# How long the agent container's readiness probe lets agentctl wait for the agent's answer, in seconds.
AGENT_HEALTH_WAIT = 1
TOKEN_ENV = "AGENTCTL_TOKEN"

# Bounds of the journal as agentctl stores and serves it, in bytes of an entry's JSON (compact, ASCII).
ENTRY_MAX_BYTES = 1024 * 1024  # a larger entry is stored cut to this, with a `truncated` marker
HISTORY_PAGE_ENTRIES = 1000  # entries of one `GET /api/v1/history` page, at most
HISTORY_PAGE_BYTES = 4 * 1024 * 1024  # encoded entries of one page, at most (a page holds one entry at least)


class StartRequest(BaseModel):
    """Body of `POST /api/v1/start`: attach to the agent and run ACP initialize + session/new or session/load."""

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = Field(
        default=None, description="ACP session to resume with session/load; omit to start a new one."
    )
    prompt: str | None = Field(
        default=None, description="Initial prompt, sent only when a new session is created (never on resume)."
    )
    cwd: str | None = Field(default=None, description="Working directory of the ACP session.")
    mode_id: str | None = Field(
        default=None,
        description="ACP mode to switch to once the session exists: a value of the agent's mode config option"
        " (set with session/set_config_option) if it offers one, else one of its modes (session/set_mode).",
    )


class StartResponse(BaseModel):
    """Answer of `POST /api/v1/start`. Repeating the call returns the same session (the call is idempotent)."""

    model_config = ConfigDict(extra="allow")

    success: bool
    session_id: SessionId
    resumed: bool = Field(default=False, description="True when session/load was used.")
    prompt_sent: bool = Field(default=False, description="True when this call sent the initial prompt.")
    current_mode_id: CurrentModeId = None
    available_modes: Modes = Field(default_factory=list)
    agent_info: AgentIdentity | None = None
    protocol_version: int = 1


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer of agentctl has this body."""

    model_config = ConfigDict(extra="allow")

    success: bool = False
    error: str = Field(description="Machine-readable error code, e.g. 'unauthorized', 'bad_request'.")
    message: str = Field(description="What failed and what to do about it.")


# --- Additions for the rest of the control API (used by the gateway and by agentctl's own handlers). ---

AgentState = Literal["stopped", "starting", "running", "stopping", "error"]
EntryKind = Literal[
    "session_update", "permission_request", "permission_resolved", "agent_error", "turn_end", "drain"
]


class InitializeBody(BaseModel):
    """Body of `POST /api/v1/acp/initialize` (may be empty)."""

    model_config = ConfigDict(extra="forbid")

    protocol_version: int = Field(default=1, ge=1, le=65535)


class SessionNewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cwd: str | None = Field(default=None, description="Absolute directory; defaults to agentctl's workdir.")


class SessionLoadBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(min_length=1, max_length=SESSION_ID_MAX_CHARS)
    cwd: str | None = None


class PromptBody(BaseModel):
    """Body of `POST /api/v1/acp/prompt`: plain text, or a list of ACP content blocks."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | list[dict[str, Any]] = Field(min_length=1)
    session_id: str | None = Field(default=None, description="Defaults to the current session.")


class PromptResult(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    stop_reason: str = Field(alias="stopReason")


class PromptAccepted(BaseModel):
    """Answer (202) of `POST /api/v1/acp/prompt?wait=false`: the turn runs on; its updates come on the stream."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    accepted: bool
    session_id: str | None = Field(default=None, alias="sessionId")


class CancelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None


class CancelResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    success: bool
    turn_running: bool = Field(description="Whether the turn still runs; it ends once the agent has stopped.")


class DrainBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float = Field(
        ge=0, le=3600, description="How long a running turn may go on before it is cancelled through ACP."
    )


DrainOutcome = Literal["idle", "finished", "cancelled"]


class DrainResponse(BaseModel):
    """How a drain ended. From then on agentctl refuses prompts, until the next start."""

    model_config = ConfigDict(extra="allow")

    outcome: DrainOutcome = Field(
        description="idle: no turn was running; finished: the turn ended by itself within the timeout; "
        "cancelled: it was still running at the deadline and was cancelled."
    )
    waited_seconds: float = Field(
        description="From the drain's start to the end of the turn (or the deadline)."
    )
    timeout_seconds: float
    cancelled_permissions: int = Field(description="Permission requests still pending at the deadline.")
    stop_reason: str | None = Field(default=None, description="The turn's stop reason, when it ended.")


class ModeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode_id: str = Field(min_length=1, max_length=MODE_ID_MAX_CHARS)
    session_id: str | None = None


class ModeResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    success: bool
    current_mode_id: str | None


class PermissionRespondBody(BaseModel):
    """Answer to a pending permission request: exactly one of `option_id` or `cancelled: true`."""

    model_config = ConfigDict(extra="forbid")

    pending_id: str = Field(min_length=1, max_length=256)
    option_id: str | None = Field(default=None, min_length=1, max_length=256)
    cancelled: bool = False

    @model_validator(mode="after")
    def _one_answer(self) -> PermissionRespondBody:
        if (self.option_id is None) == (not self.cancelled):
            raise ValueError("give exactly one of 'option_id' or 'cancelled: true'")
        return self


class PermissionRespondResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    success: bool
    pending_id: str
    outcome: dict[str, Any] = Field(
        description="The ACP outcome sent to the agent, e.g. {'outcome': 'cancelled'}."
    )


class PendingPermission(BaseModel):
    """A permission request waiting for an answer; also the notification of a `permission_request` entry."""

    model_config = ConfigDict(extra="allow")

    pending_id: str
    session_id: str
    tool_call: dict[str, Any]
    options: list[dict[str, Any]]
    created_at: str
    expires_at: str


class PermissionsResponse(BaseModel):
    """Answer of `GET /api/v1/acp/permissions`."""

    model_config = ConfigDict(extra="allow")

    pending: list[PendingPermission]


class TruncatedMarker(BaseModel):
    """Says that an entry was larger than ENTRY_MAX_BYTES and is kept cut: its longest strings are shortened."""

    model_config = ConfigDict(extra="allow")

    bytes: int = Field(description="The size of the entry's JSON as it came, before it was cut.")


class JournalEntry(BaseModel):
    """One frame of `WS /api/v1/acp/stream` and one item of `GET /api/v1/history`.

    `seq` grows by one per entry for the life of the workspace, so a client resumes with `?after=<last seq>`.
    For `kind == "session_update"`, `notification` is the ACP `session/update` params (`sessionId`, `update`).
    Every entry's JSON is at most ENTRY_MAX_BYTES; one that was larger carries `truncated`.
    """

    model_config = ConfigDict(extra="allow")

    seq: int
    timestamp: str
    kind: EntryKind
    notification: dict[str, Any]
    truncated: TruncatedMarker | None = Field(
        default=None, description="Present when the entry was cut to ENTRY_MAX_BYTES (1 MiB)."
    )

    @model_serializer(mode="wrap")
    def _as_served(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped as agentctl serves it: `truncated` only where the entry was cut."""
        data: dict[str, Any] = handler(self)
        if data.get("truncated") is None:
            data.pop("truncated", None)
        return data


class HistoryResponse(BaseModel):
    """One page of `GET /api/v1/history`: the entries after `after`, oldest first, at most HISTORY_PAGE_ENTRIES
    (1000) of them and HISTORY_PAGE_BYTES (4 MiB) of their JSON, but one at least when there is one."""

    model_config = ConfigDict(extra="allow")

    updates: list[JournalEntry]
    last_seq: int = Field(description="The journal's last seq as of the read.")
    journal_id: str
    next: int | None = Field(
        default=None,
        description="The `after` of the next page while entries up to `last_seq` remain; null once this page "
        "reached `last_seq`.",
    )


class AcpActivity(BaseModel):
    model_config = ConfigDict(extra="ignore")

    turn_running: bool = False
    session_id: str | None = None
    current_mode_id: str | None = None


class StatusResponse(BaseModel):
    """The part of `GET /api/v1/status` its clients read: the operator tells an idle agent from a busy one, the
    gateway the agent's live state and where the journal ends."""

    model_config = ConfigDict(extra="ignore")

    state: str
    acp: AcpActivity = Field(default_factory=AcpActivity)
    pending_permissions: int = 0
    last_activity_at: datetime
    last_error: str | None = None
    last_seq: int = 0
    journal_id: str | None = None


class ShellStatusResponse(BaseModel):
    """Answer of `GET /api/v1/shell/status`; the shell starts with the first buffer or stream request."""

    model_config = ConfigDict(extra="allow")

    running: bool
    pid: int | None = None
    cwd: str
    command: list[str]
    buffer_bytes: int
    clients: int
    exit_code: int | None = None


class ShellBufferResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    buffer: str = Field(description="The last 16 KiB of the shell's output.")
    running: bool


class ShellFrame(BaseModel):
    """A frame agentctl sends on `WS /api/v1/shell/stream`: output, exit, error or pong."""

    model_config = ConfigDict(extra="allow")

    type: str
    data: str | None = None
    code: int | None = None
