"""lifecycle.idleTimeout: how long until an agent counts as idle, from what agentctl reports. Pure."""

from __future__ import annotations

from datetime import datetime

from agentsession.contract.wire import StatusResponse


def seconds_until_idle(timeout_seconds: float, status: StatusResponse, now: datetime) -> float:
    """0 when the agent has been idle for the whole timeout; else how long to wait before asking again.

    Idle means no turn running, no permission waiting for an answer, and no prompt, session update, permission
    or shell input for the timeout. A busy agent is asked again a whole timeout later.
    """
    if status.acp.turn_running or status.pending_permissions:
        return timeout_seconds
    idle_for = (now - status.last_activity_at).total_seconds()
    return max(0.0, timeout_seconds - idle_for)
