"""Cluster state + agentctl state → the lifecycle status and AgentInfo a client sees. Pure: no I/O.

Every replica computes the same answer from the same inputs (the AgentSession object from the API server and
what the agent's own agentctl reports), which is what lets replicas agree without talking to each other.
"""

from __future__ import annotations

from typing import Any, Literal

from agentsession.api import reasons
from agentsession.api.egress import BUDGET_CONDITION
from agentsession.api.views import SessionView
from agentsession.contract.live_state import LiveState

AgentStatus = Literal["uninitialized", "initializing", "ready", "processing", "completed", "failed", "killed"]

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

# What the console shows of the cluster's view: the summary phase, every condition with the reason that explains
# it, the pod, how long its start took, and the model use the egress proxy metered against the session's budget.
CLUSTER_STATE_FIELDS = (
    "phase",
    "conditions",
    "podName",
    "restartCount",
    "startTime",
    "readyTime",
    "startup",
    "usage",
    "budget_exhausted",
    "budget_message",
)


def agent_id(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def derive_status(session: SessionView, live: LiveState | None) -> tuple[AgentStatus, str | None]:
    """The lifecycle status and, for `failed`, the reason a person can act on."""
    status = session.status
    if session.deleting or status.phase == "Terminating":
        return "killed", None
    if session.suspended:
        # A session that ran before keeps its history and can be resumed; one that never ran is untouched.
        return ("completed" if status.acp and status.acp.sessionId else "uninitialized"), None
    if status.phase in ("Failed", "Unknown"):
        # Unknown (the node stopped reporting) may end by itself, but until then the agent cannot be vouched for:
        # clients are told why, and see it ready again when the node is back.
        ready = session.condition("Ready")
        return "failed", (ready.message or ready.reason if ready else None) or "the agent's pod failed"
    initialized = session.condition("AgentInitialized")
    shown = reasons.client_error(initialized.reason) if initialized is not None else None
    if initialized is not None and shown is not None:
        return "failed", initialized.message or shown
    if not session.condition_true("Ready"):
        return "initializing", None
    if live is not None:
        if live.agent_state == "error":
            return "failed", live.last_error or "the agent process failed"
        if live.agent_state in ("stopped", "starting", "stopping"):
            return "initializing", None
        if live.turn_running:
            return "processing", None
    return "ready", None


def agent_info(session: SessionView, live: LiveState | None, *, deleted: bool = False) -> dict[str, Any]:
    """AgentInfo with exactly the fields of the lifecycle protocol, in its order; a session the API server deleted
    (`deleted`, its last version in `session`) is killed."""
    spec = session.spec
    acp = session.status.acp
    status, error = ("killed", None) if deleted else derive_status(session, live)
    mode = (live.current_mode_id if live and live.current_mode_id else None) or (
        acp.currentModeId if acp else None
    )
    workspace = spec.get("workspace") or {}
    return {
        "id": agent_id(session.namespace, session.name),
        "status": status,
        "createdAt": session.created_at,
        "type": (spec.get("agent") or {}).get("type", "demo"),
        "sessionId": acp.sessionId if acp else None,
        "error": error,
        "currentModeId": mode,
        "availableModes": [m.model_dump(mode="json", exclude_none=True) for m in acp.availableModes or []]
        if acp
        else [],
        "title": spec.get("title") or session.name,
        "cwd": spec.get("cwd") or workspace.get("mountPath") or "/workspace",
    }


def cluster_state(session: SessionView) -> dict[str, Any]:
    """The AgentSession's status as a person reads it: phase, conditions (type, status, reason, message, since),
    the pod, and the startup timings. Sent next to AgentInfo, which keeps exactly the protocol's fields."""
    status = session.status
    fields = status.model_dump(mode="json", include=set(CLUSTER_STATE_FIELDS))
    fields["conditions"] = [
        c.model_dump(mode="json", exclude={"observedGeneration"}) for c in status.conditions
    ]
    if status.startup is not None:
        fields["startup"] = status.startup.model_dump(mode="json", exclude_none=True)
    # status.usage as the proxy wrote it; the condition, not the gateway, decides whether the budget is spent.
    fields["usage"] = (session.body.get("status") or {}).get("usage")
    fields["budget_exhausted"], fields["budget_message"] = budget_state(session)
    return {name: fields.get(name) for name in CLUSTER_STATE_FIELDS}


def budget_state(session: SessionView) -> tuple[bool, str | None]:
    """Whether the session's condition BudgetExhausted is True, and its message (which limit was reached)."""
    condition = session.condition(BUDGET_CONDITION)
    if condition is None or condition.status != "True":
        return False, None
    return True, condition.message or "the session's budget is exhausted"
