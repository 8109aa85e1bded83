"""A session's identity as its children and its Events refer to it."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client import ApiClient

from agentsession.api.session_ref import SessionRef, owner_reference
from agentsession.controller.pool_builder import PoolRef

SESSION = SessionRef(namespace="team-a", name="fix-bug", uid="1234-uid", generation=3)


def _as_kubernetes_reads_it(reference: dict[str, Any], kind: str) -> Any:
    api = ApiClient()
    model = api.deserialize(json.dumps(reference), kind, None)
    return api.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]


def test_children_are_controlled_by_the_session_and_keep_it_until_they_are_gone() -> None:
    owner = SESSION.owner_reference()
    assert _as_kubernetes_reads_it(owner, "V1OwnerReference") == owner
    assert owner == {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "name": "fix-bug",
        "uid": "1234-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_events_are_about_the_session_in_its_namespace() -> None:
    involved = SESSION.object_reference()
    assert _as_kubernetes_reads_it(involved, "V1ObjectReference") == involved
    assert involved == {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "name": "fix-bug",
        "namespace": "team-a",
        "uid": "1234-uid",
    }


def test_a_session_is_keyed_by_namespace_and_name() -> None:
    assert SESSION.key == ("team-a", "fix-bug")
    assert SessionRef("team-b", "fix-bug", "other-uid").key != SESSION.key


def test_a_pools_warm_pods_are_controlled_by_the_pool_the_same_way() -> None:
    owner = PoolRef("team-a", "warm", "pool-uid").owner_reference()
    assert owner == {
        **SESSION.owner_reference(),
        "kind": "AgentSessionPool",
        "name": "warm",
        "uid": "pool-uid",
    }
    assert owner_reference("AgentSession", "fix-bug", "1234-uid") == SESSION.owner_reference()
