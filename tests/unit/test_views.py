"""The typed reads of a session, a pod, its containers and conditions, and an Event: each field as the API serves
it, and what each read answers when the field is missing."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentsession.api import reasons
from agentsession.api.constants import KIND
from agentsession.api.session_ref import SessionRef
from agentsession.api.views import (
    ChildView,
    ContainerStatusView,
    EventView,
    PodConditionView,
    PodView,
    SessionView,
    packed_pod,
    pod_essentials,
    unpacked_pod,
)

METADATA = {
    "namespace": "team",
    "name": "s",
    "uid": "uid-1",
    "resourceVersion": "42",
    "generation": 3,
    "creationTimestamp": "2026-01-01T11:59:50Z",
    "annotations": {"agentsession.dev/spec-hash": "abc", "count": 7},
    "labels": {"app": "agent"},
}
EXITED = {"exitCode": 1, "reason": "Error", "message": "boom"}
EARLIER = {"exitCode": 2, "reason": "OOMKilled"}


def test_an_objects_identity_is_read_from_its_metadata() -> None:
    view = ChildView({"metadata": METADATA})
    assert (view.namespace, view.name, view.uid) == ("team", "s", "uid-1")
    assert view.key == ("team", "s")
    assert view.resource_version == "42"
    assert view.created_at == "2026-01-01T11:59:50Z"
    assert view.labels == {"app": "agent"}
    assert not view.deleting
    assert ChildView({"metadata": {**METADATA, "deletionTimestamp": "2026-01-01T12:00:00Z"}}).deleting


@pytest.mark.parametrize("body", [{}, {"metadata": None}, {"metadata": {}}], ids=["none", "null", "empty"])
def test_an_object_without_metadata_reads_as_empty(body: dict[str, Any]) -> None:
    view = ChildView(body)
    assert view.key == ("", "")
    assert view.uid == view.resource_version == ""
    assert view.created_at is None
    assert view.labels == {}
    assert not view.deleting
    assert view.annotation("agentsession.dev/spec-hash") is None


def test_an_annotation_is_its_text_and_a_missing_one_none() -> None:
    view = ChildView({"metadata": METADATA})
    assert view.annotation("agentsession.dev/spec-hash") == "abc"
    assert view.annotation("count") == "7"
    assert view.annotation("agentsession.dev/other") is None
    assert ChildView({"metadata": {"annotations": {"empty": ""}}}).annotation("empty") == ""


def test_the_labels_read_are_a_copy() -> None:
    body = {"metadata": {"labels": {"app": "agent"}}}
    ChildView(body).labels["app"] = "changed"
    assert body["metadata"]["labels"] == {"app": "agent"}


def test_a_child_is_owned_by_the_uids_of_its_owner_references() -> None:
    child = ChildView(
        {"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "uid": "rs"}, {"uid": "uid-1"}]}}
    )
    assert child.owned_by("uid-1")
    assert child.owned_by("rs")
    assert not child.owned_by("uid-2")
    assert not ChildView({"metadata": {}}).owned_by("uid-1")


def test_a_child_is_held_by_another_session_only_through_a_session_owner() -> None:
    def held(refs: list[dict[str, str]]) -> bool:
        return ChildView({"metadata": {"ownerReferences": refs}}).held_by_another_session("mine")

    assert held([{"kind": KIND, "uid": "older"}])
    assert held([{"kind": KIND, "uid": "mine"}, {"kind": KIND, "uid": "older"}])
    assert not held([{"kind": KIND, "uid": "mine"}])
    assert not held([{"kind": "AgentSessionPool", "uid": "pool"}])
    assert not held([])
    assert not ChildView({"metadata": {}}).held_by_another_session("mine")


def test_a_session_reads_its_generation_spec_and_suspension() -> None:
    session = SessionView({"metadata": METADATA, "spec": {"suspend": True, "agent": {"type": "x"}}})
    assert session.generation == 3
    assert session.spec == {"suspend": True, "agent": {"type": "x"}}
    assert session.suspended
    bare = SessionView({"metadata": {}})
    assert bare.generation == 0
    assert bare.spec == {}
    assert not bare.suspended


def test_a_sessions_ref_names_its_children_after_the_claimed_member() -> None:
    status = {"startup": {"source": "Claimed", "member": "pool-abc12"}}
    assert SessionView({"metadata": METADATA, "status": status}).ref == SessionRef(
        "team", "s", "uid-1", 3, "pool-abc12"
    )
    assert SessionView({"metadata": METADATA}).ref == SessionRef("team", "s", "uid-1", 3, "")
    assert SessionView({"metadata": METADATA, "status": {"startup": {"source": "Cold"}}}).ref.stem == ""


def test_a_sessions_status_is_the_typed_model_and_its_conditions_are_read_by_type() -> None:
    status = {
        "phase": "Ready",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "lastTransitionTime": "2026-01-01T12:00:00Z",
            },
            {
                "type": "Suspended",
                "status": "False",
                "reason": "Active",
                "lastTransitionTime": "2026-01-01T12:00:00Z",
            },
        ],
    }
    session = SessionView({"metadata": METADATA, "status": status})
    assert session.status.phase == "Ready"
    ready = session.condition("Ready")
    assert ready is not None
    assert ready.reason == "Ready"
    assert session.condition("AgentctlReady") is None
    assert session.condition_true("Ready")
    assert not session.condition_true("Suspended")
    assert not session.condition_true("AgentctlReady")


def test_an_unreadable_status_reads_as_a_new_one(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="agentsession.api.views"):
        session = SessionView({"metadata": METADATA, "status": {"restartCount": -1}})
        assert session.status.restartCount is None
        assert session.status.conditions == []
    assert "ignoring the unreadable status of team/s" in caplog.text
    assert SessionView({"metadata": METADATA, "status": None}).status.phase is None


def test_a_container_status_reads_its_fields() -> None:
    status = ContainerStatusView(
        {
            "name": "agentctl",
            "ready": True,
            "started": True,
            "restartCount": 2,
            "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}},
            "lastState": {"terminated": EARLIER},
        }
    )
    assert status.name == "agentctl"
    assert status.ready
    assert status.started
    assert status.restart_count == 2
    assert status.running
    assert status.running_since == "2026-01-01T12:00:00Z"
    assert status.waiting is None
    assert status.terminated is None
    assert status.last_terminated == EARLIER
    assert status.latest_exit == EARLIER


def test_a_container_status_without_fields_has_not_started_nor_ended() -> None:
    status = ContainerStatusView({})
    assert status.name == ""
    assert not status.ready
    assert not status.started
    assert status.restart_count == 0
    assert not status.running
    assert status.running_since is None
    assert status.waiting is status.terminated is status.last_terminated is status.latest_exit is None
    assert ContainerStatusView({"state": None, "lastState": None}).latest_exit is None


def test_a_running_container_whose_start_the_kubelet_does_not_say_runs_since_an_empty_time() -> None:
    status = ContainerStatusView({"state": {"running": {}}})
    assert status.running
    assert status.running_since == ""


def test_a_containers_waiting_and_terminated_states_are_read_as_they_are() -> None:
    waiting = {"reason": "CrashLoopBackOff", "message": "back-off"}
    status = ContainerStatusView({"state": {"waiting": waiting}, "lastState": {"terminated": EARLIER}})
    assert status.waiting == waiting
    assert not status.running
    assert status.latest_exit == EARLIER
    ended = ContainerStatusView({"state": {"terminated": EXITED}, "lastState": {"terminated": EARLIER}})
    assert ended.terminated == EXITED
    assert ended.latest_exit == EXITED  # how it ended now, not how its previous run did
    assert ContainerStatusView({"state": {"waiting": {}, "terminated": {}}}).waiting is None
    assert ContainerStatusView({"state": {"terminated": {}}}).terminated is None


def test_a_pod_condition_reads_its_fields() -> None:
    condition = PodConditionView(
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available",
            "lastTransitionTime": "2026-01-01T12:00:00Z",
        }
    )
    assert condition.status == "False"
    assert not condition.true
    assert condition.reason == "Unschedulable"
    assert condition.message == "0/3 nodes are available"
    assert condition.last_transition_time == "2026-01-01T12:00:00Z"
    assert PodConditionView({"status": "True"}).true
    empty = PodConditionView({})
    assert (empty.status, empty.reason, empty.message, empty.last_transition_time) == ("", "", "", None)
    assert not empty.true


def _pod(**status: Any) -> PodView:
    return PodView({"metadata": METADATA, "spec": {"nodeName": "node-1"}, "status": status})


def test_a_pod_reads_its_status_fields_and_node() -> None:
    pod = _pod(
        phase="Running",
        podIP="10.0.0.7",
        startTime="2026-01-01T11:59:55Z",
        reason="NodeLost",
        message="the node was lost",
    )
    assert pod.phase == "Running"
    assert pod.ip == "10.0.0.7"
    assert pod.node_name == "node-1"
    assert pod.start_time == "2026-01-01T11:59:55Z"
    assert pod.reason == "NodeLost"
    assert pod.message == "the node was lost"
    assert pod.failed_reason is None  # not failed


def test_a_pod_without_status_or_node_reads_as_empty() -> None:
    for pod in (
        PodView({"metadata": METADATA}),
        PodView({"metadata": METADATA, "spec": None, "status": None}),
    ):
        assert pod.phase is pod.ip is pod.node_name is pod.start_time is pod.reason is pod.message is None
        assert pod.failed_reason is None
        assert pod.init_containers == pod.containers == []
        assert pod.init_container("agentctl") is None
        assert pod.container("agent") is None
        assert pod.restart_count == 0
        assert pod.condition("Ready") is None
        assert not pod.condition_true("Ready")


def test_a_failed_pods_reason_is_its_own_else_pod_failed() -> None:
    assert _pod(phase="Failed", reason="Evicted").failed_reason == "Evicted"
    assert _pod(phase="Failed").failed_reason == reasons.POD_FAILED
    assert _pod(phase="Failed", reason="").failed_reason == reasons.POD_FAILED
    assert _pod(phase="Succeeded", reason="Completed").failed_reason is None


def test_a_pods_containers_are_found_by_name_among_their_kind() -> None:
    pod = _pod(
        initContainerStatuses=[
            {"name": "layout", "restartCount": 1},
            {"name": "agentctl", "restartCount": 2},
        ],
        containerStatuses=[{"name": "agentctl", "restartCount": 4}, {"name": "agent", "restartCount": 8}],
    )
    agentctl = pod.init_container("agentctl")
    assert agentctl is not None
    assert agentctl.restart_count == 2
    main = pod.container("agentctl")
    assert main is not None
    assert main.restart_count == 4
    agent = pod.container("agent")
    assert agent is not None
    assert agent.name == "agent"
    assert pod.init_container("agent") is None
    assert pod.container("layout") is None
    assert [c.name for c in pod.init_containers] == ["layout", "agentctl"]
    assert [c.name for c in pod.containers] == ["agentctl", "agent"]
    assert pod.restart_count == 15  # init (and sidecar) containers' restarts count too


def test_a_pods_condition_is_the_first_of_its_type() -> None:
    pod = _pod(
        conditions=[
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            {"type": "Ready", "status": "True"},
        ]
    )
    ready = pod.condition("Ready")
    assert ready is not None
    assert ready.reason == "ContainersNotReady"
    assert not pod.condition_true("Ready")
    assert pod.condition_true("PodScheduled")
    assert pod.condition("ContainersReady") is None
    assert not pod.condition_true("ContainersReady")


def test_an_event_reads_its_message_and_when_it_last_happened() -> None:
    core = EventView({"message": "Readiness probe failed", "lastTimestamp": "t1", "eventTime": "t2"})
    assert core.message == "Readiness probe failed"
    assert core.last_seen == "t1"
    assert EventView({"eventTime": "t2"}).last_seen == "t2"
    empty = EventView({})
    assert empty.message == ""
    assert empty.last_seen is None


SERVED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "managedFields": [{"manager": "kubelet"}], "labels": {"app": "agent"}},
    "spec": {"nodeName": "node-1", "containers": [{"name": "agent", "image": "agent:1"}]},
    "status": {"phase": "Running"},
}


def test_a_pods_essentials_are_its_kind_metadata_node_and_status() -> None:
    assert pod_essentials(SERVED_POD) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "agent"}},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running"},
    }
    other = pod_essentials({**SERVED_POD, "apiVersion": "v2", "kind": "Other"})
    assert (other["apiVersion"], other["kind"]) == ("v2", "Other")


def test_the_essentials_of_a_bare_pod_are_a_pod_with_nothing_known() -> None:
    empty = {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}, "status": {}}
    assert pod_essentials({}) == empty
    assert pod_essentials({"spec": {"containers": []}, "status": None}) == empty


def test_a_packed_pod_is_compact_json_read_back_whole() -> None:
    packed = packed_pod(SERVED_POD)
    assert packed == (
        '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"app":"agent"}},'
        '"spec":{"nodeName":"node-1"},"status":{"phase":"Running"}}'
    )
    assert unpacked_pod(packed) == pod_essentials(SERVED_POD)
