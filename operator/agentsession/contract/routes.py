"""Every route of agentctl's API, defined once.

agentctl binds its handlers to these definitions (and refuses to start if one is missing on either side), its
OpenAPI document is generated from them, and the shared client calls them; so a route cannot exist in one of
those places only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from agentsession.contract.wire import (
    AGENT_HEALTH_PATH,
    HEALTH_PATH,
    HISTORY_PAGE_BYTES,
    HISTORY_PAGE_ENTRIES,
    CancelBody,
    CancelResponse,
    DrainBody,
    DrainResponse,
    HistoryResponse,
    InitializeBody,
    ModeBody,
    ModeResponse,
    PermissionRespondBody,
    PermissionRespondResponse,
    PermissionsResponse,
    PromptAccepted,
    PromptBody,
    PromptResult,
    SessionLoadBody,
    SessionNewBody,
    ShellBufferResponse,
    ShellStatusResponse,
    StartRequest,
    StartResponse,
    StatusResponse,
)


@dataclass(frozen=True)
class QueryParam:
    name: str
    type: Literal["integer", "boolean"]
    description: str | None = None
    minimum: int | None = None


@dataclass(frozen=True, eq=False)
class Route:
    """One operation: what it takes, what it answers, and the errors particular to it.

    Errors every operation can give (401, and 400/413/422 for one with a body or query) are implied.
    """

    name: str
    method: Literal["GET", "POST"]
    path: str
    summary: str
    body: type[BaseModel] | None = None
    answer: type[BaseModel] | None = None  # the 200 answer; None: an object the contract leaves open
    accepted: type[BaseModel] | None = None  # the 202 answer of an operation that can return before its end
    query: tuple[QueryParam, ...] = ()
    errors: Mapping[int, str] = field(default_factory=dict)
    auth: bool = True
    websocket: bool = False
    media_type: str = "application/json"


_AFTER = QueryParam("after", "integer", "Replay journal entries with seq > after first.", minimum=0)
_AGENT_ERRORS = {409: "Agent not attached or no session", 502: "Agent failed", 504: "Agent did not answer"}
_NOT_CURRENT = {404: "Not the current session"}

HEALTH = Route("health", "GET", HEALTH_PATH, "Liveness/readiness of agentctl itself", auth=False)
AGENT_HEALTH = Route(
    "agent-health",
    "GET",
    AGENT_HEALTH_PATH,
    "Readiness of the agent: whether it has answered ACP initialize",
    query=(
        QueryParam("wait", "integer", "Seconds to wait for the answer before saying no (at most 10).", 0),
    ),
    errors={503: "The agent has not answered ACP initialize (yet)"},
    auth=False,
)
STATUS = Route(
    "status",
    "GET",
    "/api/v1/status",
    "Agent process state, ACP state, attached clients",
    answer=StatusResponse,
)
INFO = Route("info", "GET", "/api/v1/info", "agentctl and agent identity")
START = Route(
    "start",
    "POST",
    "/api/v1/start",
    "Attach, initialize, then session/load (resume) or session/new (+ initial prompt); idempotent",
    body=StartRequest,
    answer=StartResponse,
    errors={**_AGENT_ERRORS, 503: "Agent did not connect in time"},
)
STOP = Route("stop", "POST", "/api/v1/stop", "Stop the agent")
INITIALIZE = Route(
    "initialize",
    "POST",
    "/api/v1/acp/initialize",
    "ACP initialize",
    body=InitializeBody,
    errors={**_AGENT_ERRORS, 503: "Agent did not connect"},
)
SESSION_NEW = Route(
    "session_new",
    "POST",
    "/api/v1/acp/session/new",
    "ACP session/new",
    body=SessionNewBody,
    errors=_AGENT_ERRORS,
)
SESSION_LOAD = Route(
    "session_load",
    "POST",
    "/api/v1/acp/session/load",
    "ACP session/load",
    body=SessionLoadBody,
    errors={**_AGENT_ERRORS, 404: "Unknown session", 501: "Agent cannot load sessions"},
)
PROMPT = Route(
    "prompt",
    "POST",
    "/api/v1/acp/prompt",
    "ACP session/prompt; answers with the stop reason when the turn ends (?wait=false: 202 at once)",
    body=PromptBody,
    answer=PromptResult,
    accepted=PromptAccepted,
    query=(QueryParam("wait", "boolean"),),
    errors={**_AGENT_ERRORS, **_NOT_CURRENT},
)
CANCEL = Route(
    "cancel",
    "POST",
    "/api/v1/acp/cancel",
    "ACP session/cancel",
    body=CancelBody,
    answer=CancelResponse,
    errors={**_AGENT_ERRORS, **_NOT_CURRENT},
)
DRAIN = Route(
    "drain",
    "POST",
    "/api/v1/drain",
    "Before the pod stops: let a running turn finish up to the timeout, then cancel it (pending permissions "
    "are answered as cancelled); prompts are refused from then on, until the next start",
    body=DrainBody,
    answer=DrainResponse,
)
MODE = Route(
    "mode",
    "POST",
    "/api/v1/acp/mode",
    "ACP session/set_mode, or session/set_config_option when the agent offers its modes as a config option"
    " of category mode",
    body=ModeBody,
    answer=ModeResponse,
    errors={**_AGENT_ERRORS, **_NOT_CURRENT},
)
UPDATES = Route(
    "updates",
    "GET",
    "/api/v1/acp/stream",
    "Session updates: one JournalEntry per frame",
    query=(_AFTER,),
    websocket=True,
)
PERMISSIONS = Route(
    "permissions", "GET", "/api/v1/acp/permissions", "Pending permission requests", answer=PermissionsResponse
)
PERMISSION_STREAM = Route(
    "permission_stream",
    "GET",
    "/api/v1/acp/permissions/stream",
    "Permission requests and resolutions",
    query=(_AFTER,),
    websocket=True,
)
PERMISSION_RESPOND = Route(
    "respond_permission",
    "POST",
    "/api/v1/acp/permissions/respond",
    "Answer a pending permission request",
    body=PermissionRespondBody,
    answer=PermissionRespondResponse,
    errors={404: "Unknown pending id"},
)
SHELL_STATUS = Route(
    "shell_status", "GET", "/api/v1/shell/status", "Workspace shell state", answer=ShellStatusResponse
)
SHELL_BUFFER = Route(
    "shell_buffer",
    "GET",
    "/api/v1/shell/buffer",
    "Last 16 KiB of shell output",
    answer=ShellBufferResponse,
    errors={409: "Shell cannot start"},
)
SHELL_STREAM = Route("shell", "GET", "/api/v1/shell/stream", "Shell input/output", websocket=True)
HISTORY = Route(
    "history",
    "GET",
    "/api/v1/history",
    f"One page of journal entries in order: at most `limit` ({HISTORY_PAGE_ENTRIES}) entries and"
    f" {HISTORY_PAGE_BYTES // 1024 // 1024} MiB of them; `next` is the `after` of the following page, null once"
    " the page reached `last_seq`",
    answer=HistoryResponse,
    query=(
        QueryParam("after", "integer", "Entries with seq > after.", minimum=0),
        QueryParam("limit", "integer", f"At most this many entries (capped at {HISTORY_PAGE_ENTRIES}).", 1),
    ),
)
# Open, like the probes: counters and timings carry no session content, and a scraper can send only a bearer
# token, which whatever listens on agentctl's port while it restarts would learn.
METRICS = Route("metrics", "GET", "/metrics", "Prometheus metrics", media_type="text/plain", auth=False)
OPENAPI = Route("openapi", "GET", "/api/v1/openapi.json", "This document")

ROUTES: tuple[Route, ...] = (
    HEALTH,
    AGENT_HEALTH,
    STATUS,
    INFO,
    START,
    STOP,
    INITIALIZE,
    SESSION_NEW,
    SESSION_LOAD,
    PROMPT,
    CANCEL,
    DRAIN,
    MODE,
    UPDATES,
    PERMISSIONS,
    PERMISSION_STREAM,
    PERMISSION_RESPOND,
    SHELL_STATUS,
    SHELL_BUFFER,
    SHELL_STREAM,
    HISTORY,
    METRICS,
    OPENAPI,
)
