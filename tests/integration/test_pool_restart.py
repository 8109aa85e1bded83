"""A warm pool across operator restarts: a claim cut short by the operator's stop is finished by the next one,
and an operator killed during a burst of claims leaves every pod with exactly one owner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentsession.api.constants import LABEL_CLAIMED_FROM, LABEL_POOL, LABEL_SESSION
from agentsession.api.models import AgentSessionSpec
from agentsession.api.views import SessionView
from agentsession.controller.config import OperatorConfig
from agentsession.controller.pool_builder import claim_patch, claim_target
from tests.conftest import wait_until
from tests.support.kube import Pools, Sessions
from tests.support.processes import operator_process

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]


@pytest.fixture
def pools(kube_api: Any, namespace: str) -> Pools:
    return Pools(kube_api, namespace)


def _settings(namespace_prefix: str, image: str) -> dict[str, str]:
    return {"namespaces": f'["{namespace_prefix}-*"]', "image": image, "image_pull_policy": "IfNotPresent"}


def _pods(sessions: Sessions, selector: str) -> list[Any]:
    items = sessions.core.list_namespaced_pod(sessions.namespace, label_selector=selector).items
    return [p for p in items if p.metadata.deletion_timestamp is None]


def _settled(pools: Pools, name: str, ready: int) -> bool:
    return pools.status(name).get("readyReplicas") == ready and len(pools.warm(name)) == ready


def test_a_claim_cut_short_by_a_stop_is_finished_by_the_next_operator(
    kubeconfig: str, crd_installed: list[str], project_image: str, namespace_prefix: str,
    sessions: Sessions, pools: Pools, tmp_path: Path,
) -> None:  # fmt: skip
    settings = _settings(namespace_prefix, project_image)
    with operator_process(kubeconfig, tmp_path / "first.log", **settings):
        pools.create("warm", replicas=2)
        wait_until("2 warm pods", lambda: _settled(pools, "warm", 2), 180)
    # The operator is stopped. A session arrives, and the claim's first write is made as the operator makes it,
    # as if it had been stopped right after it.
    sessions.create("late", {"poolRef": {"name": "warm"}})
    session = SessionView(sessions.get("late"))
    spec = AgentSessionSpec.model_validate(session.spec)
    config = OperatorConfig(image=project_image, image_pull_policy="IfNotPresent")
    warm = sessions.core.api_client.sanitize_for_serialization(pools.warm("warm")[0])
    desired = claim_target(session.ref, spec, warm, config)
    assert desired is not None, "the pool's pod must fit the session"
    sessions.core.patch_namespaced_pod(
        warm["metadata"]["name"],
        sessions.namespace,
        claim_patch(warm, desired, session.ref, "warm"),
        _content_type="application/merge-patch+json",  # the operator's kind of patch: lists are replaced
    )
    stem = warm["metadata"]["name"].removesuffix("-agent")

    with operator_process(kubeconfig, tmp_path / "second.log", **settings):
        wait_until("late Ready", lambda: sessions.has_condition("late", "Ready", "True"), 180)
        startup = sessions.get("late")["status"]["startup"]
        assert (startup["source"], startup["member"]) == ("Claimed", stem)
        (pod,) = _pods(sessions, f"{LABEL_SESSION}=late")
        assert pod.metadata.name == f"{stem}-agent"
        secret = sessions.core.read_namespaced_secret(f"{stem}-agentctl-token", sessions.namespace)
        assert [o.kind for o in secret.metadata.owner_references] == ["AgentSession"]
        # The other warm pod stayed in the pool, which refills to 2.
        wait_until("the pool refilled", lambda: _settled(pools, "warm", 2), 180)
        assert len(_pods(sessions, f"{LABEL_CLAIMED_FROM}=warm")) == 1


def test_an_operator_killed_during_a_burst_of_claims_leaves_one_owner_per_pod(
    kubeconfig: str, crd_installed: list[str], project_image: str, namespace_prefix: str,
    sessions: Sessions, pools: Pools, tmp_path: Path,
) -> None:  # fmt: skip
    settings = _settings(namespace_prefix, project_image)
    names = [f"b{i}" for i in range(3)]
    with operator_process(kubeconfig, tmp_path / "first.log", **settings) as first:
        pools.create("burst", replicas=3, refillPolicy="Never")
        wait_until("3 warm pods", lambda: _settled(pools, "burst", 3), 180)
        for name in names:
            sessions.create(name, {"poolRef": {"name": "burst"}})
        # Killed as soon as the first claim has been written, while the others are in flight.
        wait_until("a first claim", lambda: _pods(sessions, f"{LABEL_CLAIMED_FROM}=burst"), 30, interval=0.02)
        first.kill()

    with operator_process(kubeconfig, tmp_path / "second.log", **settings):
        for name in names:
            wait_until(f"{name} Ready", lambda n=name: sessions.has_condition(n, "Ready", "True"), 180)
        claimed = _pods(sessions, f"{LABEL_CLAIMED_FROM}=burst")
        owners = [[o.name for o in p.metadata.owner_references] for p in claimed]
        assert all(len(o) == 1 for o in owners), owners
        assert len({o[0] for o in owners}) == len(owners), f"a session holds two pods: {owners}"
        sources = {n: sessions.get(n)["status"]["startup"]["source"] for n in names}
        assert sorted(o[0] for o in owners) == sorted(n for n, s in sources.items() if s == "Claimed")
        for name in names:
            assert len(_pods(sessions, f"{LABEL_SESSION}={name}")) == 1, name
        # Nothing left half-claimed: every pod is either the pool's or one session's.
        assert not [p for p in _pods(sessions, LABEL_POOL) if LABEL_CLAIMED_FROM in (p.metadata.labels or {})]
