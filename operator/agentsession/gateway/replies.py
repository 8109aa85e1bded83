"""What the gateway answers to each command, typed and dialect-free: each dialect spells these its own way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pong:
    pass


@dataclass(frozen=True)
class AgentList:
    agents: list[dict[str, Any]]  # AgentInfo of each session the client may see
    cluster: dict[str, dict[str, Any]]  # their `status.cluster_state`, by agent id


@dataclass(frozen=True)
class Initialized:
    """The answer to an initialize: the first page of the agent's history (`next` is where the next one starts)."""

    agent_id: str
    info: dict[str, Any] | None  # None if the session was deleted meanwhile
    updates: list[dict[str, Any]]  # journal entries
    next: int | None


@dataclass(frozen=True)
class Subscribed:
    agent_id: str
    status: str | None
    agentctl_ready: bool


@dataclass(frozen=True)
class Done:
    """A command on an agent that has nothing to answer but that it was done (unsubscribing, shell input)."""

    agent_id: str


@dataclass(frozen=True)
class Prompted:
    agent_id: str
    session_id: str | None


@dataclass(frozen=True)
class ModeSet:
    agent_id: str
    current_mode_id: str | None


@dataclass(frozen=True)
class Cancelled:
    agent_id: str
    turn_running: bool


@dataclass(frozen=True)
class Suspended:
    agent_id: str


@dataclass(frozen=True)
class PermissionAnswered:
    agent_id: str
    permission_id: str
    outcome: dict[str, Any]  # the ACP outcome agentctl sent the agent


@dataclass(frozen=True)
class ShellState:
    agent_id: str
    agentctl_ready: bool
    running: bool
    cwd: str | None
    exit_code: int | None


@dataclass(frozen=True)
class ShellSubscribed:
    agent_id: str
    buffer: str  # what the shell printed before


Answer = (
    Pong
    | AgentList
    | Initialized
    | Subscribed
    | Done
    | Prompted
    | ModeSet
    | Cancelled
    | Suspended
    | PermissionAnswered
    | ShellState
    | ShellSubscribed
)
