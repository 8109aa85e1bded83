"""Pods as the API serves them, for the tests of the pure status code."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
CREATED = "2026-01-01T11:59:50Z"
UID = "pod-uid-1"


def pod_body(
    *,
    phase: str = "Running",
    conditions: list[dict[str, Any]],
    agentctl: dict[str, Any] | None = None,
    agent: dict[str, Any] | None = None,
    node: str | None = "node-1",
    **status: Any,
) -> dict[str, Any]:
    """A pod of the session `s`; the containers' statuses are given whole, other status fields as keywords."""
    body: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if agentctl is not None:
        body["initContainerStatuses"] = [{"name": "agentctl", **agentctl}]
    if agent is not None:
        body["containerStatuses"] = [{"name": "agent", **agent}]
    body.update(status)
    return {
        "metadata": {"name": "s-agent", "uid": UID, "creationTimestamp": CREATED},
        "spec": {"nodeName": node} if node else {},
        "status": body,
    }
