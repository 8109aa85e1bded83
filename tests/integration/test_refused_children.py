"""Children the API server refuses (an invalid pod, a quota) are a status with a reason, a Warning Event and a
bounded retry; never a silent error retried in the background."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.conftest import wait_until
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.cluster
SIDEWAYS_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Sideways"}]}]
        }
    }
}


def warnings_of(sessions: Sessions, name: str, reason: str) -> list[Any] | None:
    found = [e for e in sessions.events(name) if e.type == "Warning" and e.reason == reason]
    return found or None


def refusals_logged(operator: OperatorProcess, name: str) -> int:
    return sum(
        1
        for line in operator.log.read_text().splitlines()
        if "refused a child" in line and f"/{name}:" in line
    )


def test_a_pod_the_api_server_refuses_is_a_failed_session_until_the_spec_is_fixed(
    operator: OperatorProcess, sessions: Sessions
) -> None:
    # The CRD passes affinity through as an object; the API server's Pod validation checks it.
    sessions.create("refused", {"podTemplate": {"nodeSelector": NOWHERE, "affinity": SIDEWAYS_AFFINITY}})
    ready = wait_until(
        "Ready=False PodRejected",
        lambda: sessions.has_condition("refused", "Ready", "False", "PodRejected"),
        30,
    )
    assert "the API server refused the pod" in ready["message"]
    assert "operator" in ready["message"]
    assert sessions.get("refused")["status"]["phase"] == "Failed"
    warning = wait_until("a Warning event", lambda: warnings_of(sessions, "refused", "PodRejected"), 30)
    assert "Sideways" in warning[0].message or "operator" in warning[0].message, warning[0].message
    # No hot loop: the refusal is tried again after seconds, not continuously.
    first = refusals_logged(operator, "refused")
    wait_until("one retry", lambda: refusals_logged(operator, "refused") > first, 30)
    assert refusals_logged(operator, "refused") <= first + 3

    sessions.patch_spec("refused", {"podTemplate": {"affinity": None}})
    wait_until("the pod, once the spec is fixed", lambda: sessions.pod("refused"), 30)
    wait_until(
        "PodRejected gone",
        lambda: (c := sessions.condition("refused", "Ready")) is not None and c["reason"] != "PodRejected",
        30,
    )


def test_a_quota_that_refuses_the_pod_is_a_pending_session_that_starts_when_it_allows(
    operator: OperatorProcess, sessions: Sessions, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    )
    wait_until(
        "the quota's status",
        lambda: core.read_namespaced_resource_quota("no-pods", namespace).status.hard,
        30,
    )
    sessions.create("quota", {"podTemplate": {"nodeSelector": NOWHERE}})
    ready = wait_until(
        "Ready=False QuotaExceeded",
        lambda: sessions.has_condition("quota", "Ready", "False", "QuotaExceeded"),
        30,
    )
    assert "exceeded quota: no-pods" in ready["message"]
    assert sessions.get("quota")["status"]["phase"] == "Pending"
    wait_until("a Warning event", lambda: warnings_of(sessions, "quota", "QuotaExceeded"), 30)

    core.delete_namespaced_resource_quota("no-pods", namespace)
    # Nothing about the session changed: the bounded retry alone brings the pod.
    wait_until("the pod, once the quota allows it", lambda: sessions.pod("quota"), 60)


def test_a_request_above_the_default_limit_makes_a_pod_the_api_server_accepts(
    operator: OperatorProcess, sessions: Sessions
) -> None:
    sessions.create(
        "big",
        {"agent": {"resources": {"requests": {"memory": "4Gi"}}}, "podTemplate": {"nodeSelector": NOWHERE}},
    )
    pod = wait_until("the pod", lambda: sessions.pod("big"), 30)
    agent = next(c for c in pod.spec.containers if c.name == "agent")
    assert (agent.resources.requests["memory"], agent.resources.limits["memory"]) == ("4Gi", "4Gi")
