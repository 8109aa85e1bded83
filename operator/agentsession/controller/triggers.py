"""Which watch events of an AgentSession need a reconcile.

The reconciler is level-triggered and reads the session itself, so an event only has to say that something may be
left to do. A session's own status writes come back as events too; reconciling on each would double the work of a
burst of sessions for nothing, since the reconcile that wrote the status already acted on what it saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
