"""Cluster state + agentctl state → the lifecycle status and AgentInfo a client sees. Pure: no I/O.

Every replica computes the same answer from the same inputs (the AgentSession object from the API server and
what the agent's own agentctl reports), which is what lets replicas agree without talking to each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

AgentStatus = Literal["uninitialized", "initializing", "ready", "processing", "completed", "failed", "killed"]
Manifest = dict[str, Any]

AGENT_INFO_FIELDS = (
    "id",
    "status",
    "createdAt",
    "type",
    "sessionId",
    "error",
    "currentModeId",
    "availableModes",
    "title",
    "cwd",
)


@dataclass(frozen=True)
class LiveState:
    """What the agent's agentctl told this replica (its status and update stream); None fields are unknown."""

    agent_state: str | None = None  # stopped | starting | running | stopping | error
    turn_running: bool = False
    last_error: str | None = None
    current_mode_id: str | None = None


def agent_id(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def condition(session: Manifest, kind: str) -> Manifest | None:
    conditions = (session.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def condition_true(session: Manifest, kind: str) -> bool:
    found = condition(session, kind)
    return found is not None and found.get("status") == "True"


def is_suspended(session: Manifest) -> bool:
    return bool((session.get("spec") or {}).get("suspend"))


def _acp(session: Manifest) -> Manifest:
    return (session.get("status") or {}).get("acp") or {}


def derive_status(session: Manifest, live: LiveState | None) -> tuple[AgentStatus, str | None]:
    """The lifecycle status and, for `failed`, the reason a person can act on."""
    meta = session.get("metadata") or {}
    status = session.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") == "Terminating":
        return "killed", None
    if is_suspended(session):
        # A session that ran before keeps its history and can be resumed; one that never ran is untouched.
        return ("completed" if _acp(session).get("sessionId") else "uninitialized"), None
    if status.get("phase") == "Failed":
        ready = condition(session, "Ready") or {}
        return "failed", ready.get("message") or ready.get("reason") or "the agent's pod failed"
    initialized = condition(session, "AgentInitialized") or {}
    if initialized.get("reason") == "InitializeFailed":
        return "failed", initialized.get("message") or "ACP initialization failed"
    if not condition_true(session, "Ready"):
        return "initializing", None
    if live is not None:
        if live.agent_state == "error":
            return "failed", live.last_error or "the agent process failed"
        if live.agent_state in ("stopped", "starting", "stopping"):
            return "initializing", None
        if live.turn_running:
            return "processing", None
    return "ready", None


def agent_info(session: Manifest, live: LiveState | None) -> dict[str, Any]:
    """AgentInfo with exactly the fields of the lifecycle protocol, in its order."""
    meta = session.get("metadata") or {}
    spec = session.get("spec") or {}
    acp = _acp(session)
    status, error = derive_status(session, live)
    modes = acp.get("availableModes")
    mode = (live.current_mode_id if live and live.current_mode_id else None) or acp.get("currentModeId")
    workspace = spec.get("workspace") or {}
    return {
        "id": agent_id(meta.get("namespace", ""), meta.get("name", "")),
        "status": status,
        "createdAt": meta.get("creationTimestamp"),
        "type": (spec.get("agent") or {}).get("type", "demo"),
        "sessionId": acp.get("sessionId"),
        "error": error,
        "currentModeId": mode,
        "availableModes": list(modes) if modes else [],
        "title": spec.get("title") or meta.get("name"),
        "cwd": spec.get("cwd") or workspace.get("mountPath") or "/workspace",
    }
