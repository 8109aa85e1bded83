"""Which watch events of an AgentSession need a reconcile.

The reconciler is level-triggered and reads the session itself, so an event only has to say that something may be
left to do. A session's own status writes come back as events too; reconciling on each would double the work of a
burst of sessions for nothing, since the reconcile that wrote the status already acted on what it saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from agentsession.api.egress import BUDGET_CONDITION, Budget, Usage, effective_budget, exhausted


def needs_reconcile(event_type: str | None, body: Mapping[str, Any]) -> bool:
    """Whether this event may leave the operator something to do.

    Yes for the operator's first sight of a session (kopf's listing, `event_type` None), its creation and deletion,
    a deletion in progress, and a spec (generation) the status has not observed yet; no for an event that changed
    only the status or metadata the operator does not read."""
    if event_type in (None, "ADDED", "DELETED"):
        return True
    metadata = body.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return True
    observed = (body.get("status") or {}).get("observedGeneration")
    return observed is None or observed != metadata.get("generation")


def budget_turned(
    body: Mapping[str, Any], namespace_annotations: Mapping[str, str] | None, default: Budget
) -> bool:
    """Whether the session's usage (which the egress proxy writes, in the status) now says another thing of its
    budget than its BudgetExhausted condition does: then a reconcile turns the condition, posts its Event and
    cancels the running turn. The proxy's usage writes are status-only and otherwise left alone, so a session that
    streams tokens costs no reconcile per write.

    `namespace_annotations` None (the namespace not read yet) lets any session with usage through: its reconcile
    reads them."""
    status = body.get("status") or {}
    if not status.get("usage"):
        return False
    if namespace_annotations is None:
        return True
    try:
        usage = Usage.model_validate(status["usage"])
        budget = Budget.model_validate((body.get("spec") or {}).get("budget") or {})
    except ValidationError:
        return False  # the API server's schema holds these; a reconcile would read the same
    spent = exhausted(usage, effective_budget(budget, namespace_annotations, default)) is not None
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == BUDGET_CONDITION), None)
    return spent != (condition is not None and condition.get("status") == "True")
