"""Warm pools on a node: a session claims a warm pod and is Ready in it, keeps working across suspend and resume,
outlives its pool; two sessions race for the last warm pod; a pool scales down and up."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from tests.conftest import wait_until
from tests.support.kube import Pools, Sessions
from tests.support.processes import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]


@pytest.fixture
def pools(kube_api: Any, namespace: str) -> Pools:
    return Pools(kube_api, namespace)


def startup(sessions: Sessions, name: str) -> dict[str, Any]:
    found: dict[str, Any] = sessions.get(name)["status"]["startup"]
    return found


async def test_a_session_claims_a_warm_pod_resumes_in_it_and_outlives_its_pool(
    node_operator: OperatorProcess, sessions: Sessions, pools: Pools
) -> None:
    pools.create("warm", replicas=2, template={"agent": {"type": "demo"}, "workspace": {"size": "64Mi"}})
    await pools.until_ready("warm", 2)
    stems = {p.metadata.name.removesuffix("-agent") for p in pools.warm("warm")}

    applied = time.monotonic()
    sessions.create(
        "claimer", {"poolRef": {"name": "warm"}, "workspace": {"size": "64Mi"}, "prompt": "hello"}
    )
    await sessions.until_ready("claimer")
    print(f"\nclaim -> Ready {time.monotonic() - applied:.2f}s")
    first = startup(sessions, "claimer")
    assert first["source"] == "Claimed"
    assert first["member"] in stems
    pod = sessions.pod("claimer")
    assert pod.metadata.owner_references[0].kind == "AgentSession"
    assert sessions.get("claimer")["status"]["acp"]["sessionId"]

    # The pool refills and counts the claim.
    await pools.until_ready("warm", 2)
    assert pools.status("warm")["claimed"] == 1

    # Suspend and resume: the next pod is named after the same warm pod, with its token and workspace.
    uid = pod.metadata.uid
    sessions.patch_spec("claimer", {"suspend": True})
    await asyncio.to_thread(wait_until, "the pod gone", lambda: sessions.pod_gone("claimer", uid), 90)
    sessions.patch_spec("claimer", {"suspend": False})
    await sessions.until_ready("claimer")
    assert sessions.pod("claimer").metadata.name == f"{first['member']}-agent"
    assert sessions.pod("claimer").metadata.uid != uid

    # Deleting the pool removes its warm pods only.
    pools.delete("warm")
    await asyncio.to_thread(wait_until, "the warm pods gone", lambda: not pools.warm("warm"), 90)
    assert sessions.has_condition("claimer", "Ready", "True")
    assert sessions.pod("claimer").metadata.deletion_timestamp is None
    sessions.core.read_namespaced_secret(f"{first['member']}-agentctl-token", sessions.namespace)


async def test_two_sessions_racing_for_the_last_warm_pod_one_claims_one_starts_cold(
    node_operator: OperatorProcess, sessions: Sessions, pools: Pools
) -> None:
    pools.create("last", replicas=1, refillPolicy="Never")
    await pools.until_ready("last", 1)
    for name in ("a", "b"):
        sessions.create(name, {"poolRef": {"name": "last"}})
    await asyncio.gather(sessions.until_ready("a"), sessions.until_ready("b"))
    sources = sorted(startup(sessions, name)["source"] for name in ("a", "b"))
    assert sources == ["Claimed", "Cold"]
    cold = next(name for name in ("a", "b") if startup(sessions, name)["source"] == "Cold")
    assert startup(sessions, cold)["reason"] in ("PoolEmpty", "PoolNotReady")
    assert len(pools.claimed("last")) == 1
    assert pools.warm("last") == [], "refillPolicy Never: the claim is not replaced"


async def test_a_pool_scales_down_and_up(
    node_operator: OperatorProcess, sessions: Sessions, pools: Pools
) -> None:
    pools.create("elastic", replicas=2)
    await pools.until_ready("elastic", 2)
    pools.patch("elastic", {"replicas": 0})
    await pools.until_ready("elastic", 0)
    pools.patch("elastic", {"replicas": 1})
    await pools.until_ready("elastic", 1)


async def test_a_session_whose_pool_has_no_warm_pod_starts_cold_and_says_why(
    node_operator: OperatorProcess, sessions: Sessions
) -> None:
    sessions.create("orphan", {"poolRef": {"name": "absent"}})
    await sessions.until_ready("orphan")
    found = startup(sessions, "orphan")
    assert (found["source"], found["pool"], found["reason"]) == ("Cold", "absent", "PoolEmpty")
    assert "pool absent has no warm pod" in found["message"]
    assert sessions.pod("orphan").metadata.name == "orphan-agent"
    assert any(e.reason == "PoolEmpty" for e in sessions.events("orphan"))
