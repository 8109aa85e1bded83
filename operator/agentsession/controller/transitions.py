"""Status changes → the Kubernetes Events that tell `kubectl describe` readers what happened. Pure.

A short story, not a log: one Event when the phase changes (its reason and message are those of the `Ready`
condition, which says why), and one Warning when a condition turns to a reason that needs attention. A normal
start reads PodCreated, Pending, the reason it is Starting (e.g. PodInitializing), Ready.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentsession.api import reasons
from agentsession.api.egress import BUDGET_CONDITION
from agentsession.api.models import AgentSessionStatus
from agentsession.contract.wire import DrainResponse
from agentsession.controller.status_mapper import KUBELET_CACHE_LAG

BUDGET_RAISED = "BudgetRaised"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event the operator posts about a session: of a status change here, or of an act of the plan."""

    type: str  # Normal | Warning
    reason: str
    message: str


def status_events(previous: AgentSessionStatus, current: AgentSessionStatus) -> list[Event]:
    """The Events of one status change: the phase change first, then warnings not told by it."""
    events: list[Event] = []
    ready = current.condition("Ready")
    if ready is not None and current.phase is not None and current.phase != previous.phase:
        kind = (
            "Warning"
            if reasons.is_in(ready.reason, reasons.WARNING) or current.phase == "Failed"
            else "Normal"
        )
        events.append(Event(kind, ready.reason, _phase_message(current, ready.message)))
    told = {event.reason for event in events}
    for condition in current.conditions:
        before = previous.condition(condition.type)
        if not reasons.is_in(condition.reason, reasons.WARNING) or condition.reason in told:
            continue
        if KUBELET_CACHE_LAG.match(condition.message):
            continue  # the kubelet catching up with a Secret that exists: the session is only Starting
        if before is not None and before.reason == condition.reason:
            continue
        events.append(Event("Warning", condition.reason, f"{condition.type}: {condition.message}"))
        told.add(condition.reason)
    budget = _budget_event(previous, current)
    if budget is not None:
        events.append(budget)
    return events


def _budget_event(previous: AgentSessionStatus, current: AgentSessionStatus) -> Event | None:
    """A Warning naming the limit when the budget is spent, a Normal one when it is raised past the usage."""
    before, after = previous.condition(BUDGET_CONDITION), current.condition(BUDGET_CONDITION)
    was = before is not None and before.status == "True"
    if after is None or (after.status == "True") == was:
        return None
    if after.status == "True":
        return Event(
            "Warning",
            after.reason,
            f"budget exhausted: {after.message}; model calls are refused and the running turn is cancelled; "
            "raise spec.budget to go on",
        )
    return Event("Normal", BUDGET_RAISED, f"the budget allows model calls again: {after.message}")


def _phase_message(status: AgentSessionStatus, why: str) -> str:
    startup = status.startup
    if status.phase == "Ready" and startup is not None and startup.initializedSeconds is not None:
        return f"Ready: {why} ({startup.initializedSeconds:.1f}s after the pod was created)"
    return f"{status.phase}: {why}"


def drain_event(result: DrainResponse) -> Event | None:
    """How a drain before a pod's deletion ended; nothing to tell when no turn was running."""
    if result.outcome == "idle":
        return None
    if result.outcome == "finished":
        return Event(
            "Normal",
            "TurnFinished",
            f"the running turn finished {result.waited_seconds:.1f}s into the drain "
            f"(stop reason {result.stop_reason}); stopping the pod",
        )
    permissions = result.cancelled_permissions
    answered = (
        f"; {permissions} pending permission request{'s' if permissions != 1 else ''} answered as cancelled"
        if permissions
        else ""
    )
    return Event(
        "Warning",
        "TurnCancelled",
        f"the turn was still running at lifecycle.drainTimeout ({result.timeout_seconds:g}s) and was "
        f"cancelled through ACP{answered}; stopping the pod",
    )
