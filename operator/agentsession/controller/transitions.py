"""Condition changes → the Kubernetes Events that tell `kubectl describe` readers what happened. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from agentsession.api.models import AgentSessionStatus
from agentsession.controller.rejections import QUOTA_REASON
from agentsession.controller.status_mapper import FAILED_REASONS, IMAGE_PULL_REASONS

WARNING_REASONS = (
    FAILED_REASONS
    | IMAGE_PULL_REASONS
    | {
        "Unschedulable",
        "ProbeFailing",
        "InitializeFailed",
        "AgentExited",
        QUOTA_REASON,
        "PodDeleted",
        "AgentctlRestarted",
    }
)


@dataclass(frozen=True)
class EventRecord:
    type: str  # "Normal" or "Warning"
    reason: str
    message: str


def condition_events(previous: AgentSessionStatus, current: AgentSessionStatus) -> list[EventRecord]:
    """One event per condition whose status or reason changed, in the order conditions are listed."""
    events = []
    for condition in current.conditions:
        before = previous.condition(condition.type)
        if before is not None and (before.status, before.reason) == (condition.status, condition.reason):
            continue
        events.append(
            EventRecord(
                type="Warning" if condition.reason in WARNING_REASONS else "Normal",
                reason=condition.reason,
                message=f"{condition.type}={condition.status}: {condition.message}",
            )
        )
    return events
