"""Which session events reconcile: every one that may leave work, none that only echo a status write."""

from __future__ import annotations

from typing import Any

import pytest

from agentsession.controller.triggers import needs_reconcile


def session(generation: int = 2, observed: int | None = 2, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "s", "generation": generation, "resourceVersion": "7"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {} if observed is None else {"observedGeneration": observed, "phase": "Ready"}
    return {"metadata": metadata, "spec": {}, "status": status}


@pytest.mark.parametrize(
    ("event_type", "body", "expected"),
    [
        pytest.param(None, session(), True, id="first seen (kopf's listing)"),
        pytest.param("ADDED", session(generation=1, observed=None), True, id="created"),
        pytest.param("DELETED", session(), True, id="gone"),
        pytest.param("MODIFIED", session(deleting=True), True, id="deletion in progress"),
        pytest.param("MODIFIED", session(generation=3, observed=2), True, id="spec changed"),
        pytest.param("MODIFIED", session(generation=1, observed=None), True, id="never reported on"),
        pytest.param("MODIFIED", session(generation=2, observed=2), False, id="own status write"),
    ],
)
def test_events_that_may_leave_work_reconcile(
    event_type: str | None, body: dict[str, Any], expected: bool
) -> None:
    assert needs_reconcile(event_type, body) is expected


def test_a_session_without_status_or_metadata_still_reconciles() -> None:
    assert needs_reconcile("MODIFIED", {}) is True
