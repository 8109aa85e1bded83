"""kopf must take a namespace from any listing of its namespace watch, or a namespace made at the wrong moment
is never served."""

from __future__ import annotations

from typing import Any

import pytest
from kopf._cogs.structs import references
from kopf._core.reactor import observation

from agentsession.controller import namespace_listing


def _listed(name: str) -> Any:
    return {"type": None, "object": {"metadata": {"name": name}}}


async def _process(event: Any, insights: references.Insights) -> None:
    await observation.process_discovered_namespace_event(
        raw_event=event, namespaces=["t-*"], insights=insights
    )


async def test_listed_namespaces_are_served_once_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Restored after the test: other tests see kopf as it ships.
    monkeypatch.setattr(
        observation, "process_discovered_namespace_event", observation.process_discovered_namespace_event
    )
    insights = references.Insights()
    await _process(_listed("t-early"), insights)
    assert insights.namespaces == set(), "kopf now serves listed namespaces itself: drop namespace_listing"

    namespace_listing.install()
    await _process(_listed("t-late"), insights)
    await _process(_listed("other"), insights)
    await _process({"type": "ADDED", "object": {"metadata": {"name": "t-added"}}}, insights)
    deleted = {"metadata": {"name": "t-late", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    await _process({"type": "DELETED", "object": deleted}, insights)
    assert insights.namespaces == {"t-added"}
