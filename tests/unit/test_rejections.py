"""The API server's refusals → what a session shows, and how soon it tries again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentsession.api.models import AgentSessionStatus
from agentsession.controller.rejections import Rejection, rejection, retry_after
from agentsession.controller.status_mapper import Observation, map_status
from agentsession.controller.transitions import status_events

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
QUOTA = 'pods "s-agent" is forbidden: exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0'


@pytest.mark.parametrize(
    ("kind", "status", "said", "reason"),
    [
        ("Pod", 422, 'spec.tolerations[0].operator: Unsupported value: "Sideways"', "PodRejected"),
        ("Pod", 400, "bad request", "PodRejected"),
        ("PersistentVolumeClaim", 422, "spec.resources[storage]: Invalid value", "WorkspaceRejected"),
        ("Secret", 422, "data: Invalid value", "SecretRejected"),
        ("Pod", 403, QUOTA, "QuotaExceeded"),
        ("Pod", 403, 'pods "s-agent" is forbidden: violates PodSecurity "restricted:latest"', "Forbidden"),
    ],
)
def test_refusals_name_what_was_refused_and_why(kind: str, status: int, said: str, reason: str) -> None:
    found = rejection(kind, status, said)
    assert found is not None
    assert found.reason == reason
    assert said in found.message


@pytest.mark.parametrize(("kind", "status"), [("Pod", 500), ("Pod", 409), ("Pod", None), (None, 422)])
def test_outages_are_not_refusals(kind: str | None, status: int | None) -> None:
    assert rejection(kind, status, "etcd timeout") is None


def test_retries_wait_as_long_as_the_refusal_has_lasted_within_bounds() -> None:
    assert retry_after(None, NOW) == 5.0
    assert retry_after(NOW - timedelta(seconds=2), NOW) == 5.0
    assert retry_after(NOW - timedelta(seconds=40), NOW) == 40.0
    assert retry_after(NOW - timedelta(hours=1), NOW) == 300.0


@pytest.mark.parametrize(("reason", "phase"), [("PodRejected", "Failed"), ("QuotaExceeded", "Pending")])
def test_a_refused_pod_is_the_sessions_status_and_a_warning(reason: str, phase: str) -> None:
    refused = Rejection(reason, "the API server refused the pod: nope")
    status = map_status(
        Observation(generation=2, suspend=False, previous=AgentSessionStatus(), now=NOW, rejection=refused)
    )
    ready = status.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == ("False", reason, refused.message)
    assert status.phase == phase
    events = status_events(AgentSessionStatus(), status)
    assert [(e.type, e.reason) for e in events] == [("Warning", reason)], "one Warning says it, once"
    assert refused.message in events[0].message
