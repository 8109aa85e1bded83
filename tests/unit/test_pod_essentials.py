"""What the operator's indexes keep of a pod: everything its status mapping reads, none of the bulk."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsession.api.models import AgentSessionSpec
from agentsession.api.session_ref import SessionRef
from agentsession.api.views import packed_pod, pod_essentials, unpacked_pod
from agentsession.controller.config import OperatorConfig
from agentsession.controller.pod_builder import build_pod
from agentsession.controller.status_mapper import Observation, map_status
from tests.support.pod_bodies import NOW
from tests.unit.test_status_mapper import CASES, Case


def as_served(pod: dict[str, Any]) -> dict[str, Any]:
    """The case's pod as the API serves it: the operator's whole pod spec, and managedFields."""
    built = build_pod(SessionRef("ns", "s", "session-uid"), AgentSessionSpec(), OperatorConfig())
    served = copy.deepcopy(pod)
    served["spec"] = {**built["spec"], **served.get("spec", {})}
    served["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    return served


def mapped(pod: dict[str, Any] | None, case: Case) -> dict[str, Any]:
    observation = Observation(generation=1, suspend=case.suspend, previous=case.previous, now=NOW, pod=pod)
    return map_status(observation).model_dump(mode="json")


@pytest.mark.parametrize("case", [c for c in CASES if c.pod is not None], ids=lambda c: c.id)
def test_a_pod_maps_to_the_same_status_as_its_essentials(case: Case) -> None:
    assert case.pod is not None
    served = as_served(case.pod)
    assert mapped(unpacked_pod(packed_pod(served)), case) == mapped(served, case)


def test_the_essentials_leave_out_the_containers_and_managed_fields() -> None:
    case = next(c for c in CASES if c.pod is not None)
    assert case.pod is not None
    served = as_served(case.pod)
    kept = pod_essentials(served)
    assert kept["spec"] == {"nodeName": served["spec"]["nodeName"]}
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"] == {k: v for k, v in served["metadata"].items() if k != "managedFields"}
    assert kept["status"] == served["status"]


def test_a_packed_pod_is_its_essentials_and_each_unpacking_is_a_new_object() -> None:
    case = next(c for c in CASES if c.pod is not None)
    assert case.pod is not None
    served = as_served(case.pod)
    packed = packed_pod(served)
    assert unpacked_pod(packed) == pod_essentials(served)
    first = unpacked_pod(packed)
    first["status"]["phase"] = "changed"
    assert unpacked_pod(packed)["status"]["phase"] == served["status"]["phase"] != "changed"
