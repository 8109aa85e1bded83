"""The reason table: each condition reason once, with its classes, and every reason the mapper writes is in it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from agentsession.api import reasons
from agentsession.api.egress import Budget, Usage
from agentsession.api.models import AgentSessionStatus, Condition
from agentsession.api.views import PodView
from agentsession.controller.rejections import REASON_BY_KIND, rejection
from agentsession.controller.status_mapper import Observation, map_status
from tests.support.pod_bodies import NOW, pod_body
from tests.unit import test_status_mapper, test_status_messages

# The classes as the operator has always drawn them: the phase, the Warnings, the start call and the refusals.
EXPECTED = {
    reasons.FAILED: {
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "InvalidImageName",
        "InvalidSpec",
        "RunContainerError",
        "PodFailed",
        "Evicted",
        "DeadlineExceeded",
        "AgentNotAnswering",
        "PodRejected",
        "WorkspaceRejected",
        "SecretRejected",
        "NetworkPolicyRejected",
        "Forbidden",
    },
    reasons.PENDING: {
        "PodNotCreated",
        "PodDeleted",
        "Pending",
        "Unschedulable",
        "QuotaExceeded",
        "EgressProxyUnavailable",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
    },
    reasons.START_DUE: {
        "Initializing",
        "AgentctlRestarted",
        "AgentRestarted",
        "InitializeFailed",
        "AgentExited",
    },
    reasons.IMAGE_PULL: {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"},
    reasons.REJECTED: {
        "PodRejected",
        "WorkspaceRejected",
        "SecretRejected",
        "NetworkPolicyRejected",
        "Forbidden",
    },
}
WARNED_BESIDES = {
    "Unschedulable",
    "ProbeFailing",
    "InitializeFailed",
    "AgentExited",
    "QuotaExceeded",
    "PodDeleted",
    "AgentctlRestarted",
    "AgentRestarted",
    "NodeNotReady",
    "EgressProxyUnavailable",
}

# Said, not acted on: the phase Starting (or the one of Ready itself), no Warning.
UNCLASSED = {
    "Active",
    "AgentctlNotReady",
    "BudgetExhausted",
    "ContainerCreating",
    "Initialized",
    "PodInitializing",
    "PodTerminating",
    "ProbeSucceeded",
    "Ready",
    "Rejected",
    "Scheduled",
    "Starting",
    "Suspended",
    "Terminated",
    "Terminating",
    "TurnRunning",
    "Waiting",
    "WithinBudget",
}


def test_the_table_holds_the_classed_reasons_and_the_unclassed_ones() -> None:
    classed = set().union(*EXPECTED.values(), WARNED_BESIDES)
    assert set(reasons.REASONS) == classed | UNCLASSED
    assert all(reasons.REASONS[name].classes == reasons.UNCLASSED for name in UNCLASSED)


@pytest.mark.parametrize("kind", list(EXPECTED), ids=lambda kind: str(kind.name))
def test_each_class_holds_exactly_its_reasons(kind: reasons.Class) -> None:
    assert reasons.of_class(kind) == EXPECTED[kind]
    assert all(reasons.is_in(name, kind) for name in EXPECTED[kind])
    assert not any(reasons.is_in(name, kind) for name in set(reasons.REASONS) - EXPECTED[kind])


def test_warnings_are_the_failures_the_image_pulls_and_a_few_more() -> None:
    expected = EXPECTED[reasons.FAILED] | EXPECTED[reasons.IMAGE_PULL] | WARNED_BESIDES
    assert reasons.of_class(reasons.WARNING) == expected


def test_a_reason_not_in_the_table_is_in_no_class_and_no_error_to_a_client() -> None:
    assert "SomethingNew" not in reasons.REASONS
    assert not any(reasons.is_in("SomethingNew", kind) for kind in reasons.Class)
    assert reasons.client_error("SomethingNew") is None


def test_only_a_failed_acp_start_is_an_error_a_client_is_shown_by_its_reason() -> None:
    shown = {name: reason.client_error for name, reason in reasons.REASONS.items() if reason.client_error}
    assert shown == {"InitializeFailed": "ACP initialization failed"}
    assert reasons.client_error("InitializeFailed") == "ACP initialization failed"
    assert reasons.client_error("Initialized") is None


def test_each_row_is_named_by_its_reason_and_a_reason_is_in_the_table_once() -> None:
    assert all(reason.name == name for name, reason in reasons.REASONS.items())
    assert reasons.REASONS["PodFailed"] == reasons.Reason("PodFailed", reasons.FAILED | reasons.WARNING)
    assert reasons.REASONS["Suspended"].classes == reasons.UNCLASSED == reasons.Class(0)
    with pytest.raises(ValueError, match="PodFailed is in the table twice"):
        reasons._reason("PodFailed")
    assert reasons.REASONS["PodFailed"].classes == reasons.FAILED | reasons.WARNING


def test_every_reason_is_one_a_condition_can_carry() -> None:
    for name in reasons.REASONS:
        Condition(type="Ready", status="False", reason=name, lastTransitionTime=NOW)


def _corpus() -> Iterator[Observation]:
    """The pod situations of the mapper's table tests, and the situations with no pod or no budget left."""
    yield from (test_status_mapper.observe(case) for case in test_status_mapper.CASES)
    yield from (test_status_messages._observe(case) for case in test_status_messages.CASES)
    bare = Observation(generation=1, suspend=False, previous=AgentSessionStatus(), now=NOW)
    yield replace(bare, spec_error="spec.agent.image: required")
    yield replace(bare, egress_unavailable="no egress proxy Service")
    yield replace(bare, restart_pending="a turn runs")
    yield replace(bare, deleting=True, pod=pod_body(conditions=[]))
    spent = AgentSessionStatus(usage=Usage(requests=3))
    yield replace(bare, previous=spent, budget=Budget(maxRequests=3))
    for kind in [*REASON_BY_KIND, "ConfigMap"]:
        for status, said in ((422, "invalid"), (403, "forbidden"), (403, "exceeded quota: q")):
            yield replace(bare, rejection=rejection(kind, status, said))


def test_every_reason_the_mapper_writes_is_in_the_table() -> None:
    written = {c.reason for obs in _corpus() for c in map_status(obs).conditions}
    assert written - set(reasons.REASONS) == set()
    # The corpus reaches far: a table the mapper outgrew would show here.
    assert len(written) >= 40


def test_a_failed_pod_without_a_reason_failed_with_podfailed_to_every_reader() -> None:
    failed = pod_body(conditions=[], phase="Failed")
    assert PodView(failed).failed_reason == reasons.POD_FAILED == "PodFailed"
    status = map_status(
        Observation(generation=1, suspend=False, previous=AgentSessionStatus(), now=NOW, pod=failed)
    )
    assert status.condition("AgentctlReady") is not None
    assert status.condition("AgentctlReady").reason == "PodFailed"  # type: ignore[union-attr]
    evicted = pod_body(conditions=[], phase="Failed", reason="Evicted")
    assert PodView(evicted).failed_reason == "Evicted"
    assert PodView(pod_body(conditions=[], phase="Running")).failed_reason is None


def test_a_reason_is_entered_once_with_its_classes_and_what_a_client_is_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The table is filled at import, before a test can watch it: entering one more shows how it is filled.
    monkeypatch.setattr(reasons, "_TABLE", dict(reasons._TABLE))
    name = reasons._reason("SomethingNew", reasons.FAILED | reasons.WARNING, client_error="it broke")
    assert name == "SomethingNew"
    assert reasons._TABLE[name] == reasons.Reason(name, reasons.FAILED | reasons.WARNING, "it broke")
    assert reasons._reason("Plain") == "Plain"
    assert reasons._TABLE["Plain"] == reasons.Reason("Plain", reasons.UNCLASSED, None)
    with pytest.raises(
        ValueError, match="reason SomethingNew is in the table twice: keep one line per reason"
    ):
        reasons._reason("SomethingNew")
