"""Warm pools against the in-memory API server: the pool keeps its pods, a session claims one (or starts cold and
says why), two sessions racing for one pod, a claim the operator was stopped in the middle of."""

from __future__ import annotations

import copy
from typing import Any

from agentsession.api.constants import API_VERSION, LABEL_CLAIMED_FROM, LABEL_POOL, LABEL_SESSION, POOL_KIND
from agentsession.api.views import SessionView
from agentsession.controller.pool_builder import adopt_patch, claim_patch, claim_target, stem_of
from agentsession.controller.pool_reconciler import REFILL_AT_ONCE, PoolReconciler
from agentsession.controller.reconciler import CLAIM_RETRY_SECONDS
from agentsession.kube.resources import PODS
from tests.unit.test_reconciler import NAME, NS, World

POOL = "warm"


class PoolWorld(World):
    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.pools = PoolReconciler(
            self.config, self.kube, self.pods_labelled, lambda namespace, stem: f"token-of-{namespace}-{stem}"
        )

    async def make_pool(self, replicas: int = 2, **spec: Any) -> None:
        await self.kube.create(
            {"apiVersion": API_VERSION, "kind": POOL_KIND, "metadata": {"name": POOL, "namespace": NS},
             "spec": {"replicas": replicas, "template": {"agent": {"type": "demo"}}, **spec}}
        )  # fmt: skip
        await self.pools.reconcile(NS, POOL)

    def members(self) -> list[dict[str, Any]]:
        return self.pods_labelled(NS, LABEL_POOL, POOL)

    def ready_all(self) -> None:
        for pod in self.members():
            pod["status"] = {"phase": "Running", "podIP": "10.0.0.9",
                             "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
            self.kube.put(pod)

    def pool_status(self) -> dict[str, Any]:
        pool = self.kube.find(POOL_KIND, NS, POOL)
        assert pool is not None
        status: dict[str, Any] = pool.get("status") or {}
        return status


async def test_a_pool_keeps_its_warm_pods_each_with_its_token() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=2)
    members = world.members()
    assert len(members) == 2
    for pod in members:
        assert pod["metadata"]["ownerReferences"][0]["kind"] == POOL_KIND
        assert LABEL_SESSION not in pod["metadata"]["labels"]
        assert world.kube.find("Secret", NS, f"{stem_of(pod)}-agentctl-token") is not None
    world.ready_all()
    await world.pools.reconcile(NS, POOL)
    assert world.pool_status() == {"replicas": 2, "readyReplicas": 2, "claimed": 0, "observedGeneration": 1}


async def test_a_session_claims_a_warm_pod_and_its_children_move_to_it() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=1)
    world.ready_all()
    (member,) = world.members()
    stem = stem_of(member)
    await world.apply(poolRef={"name": POOL})
    await world.reconcile()

    pod = world.kube.find("Pod", NS, f"{stem}-agent")
    assert pod is not None
    labels = pod["metadata"]["labels"]
    assert (labels[LABEL_SESSION], labels[LABEL_CLAIMED_FROM], LABEL_POOL in labels) == (NAME, POOL, False)
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "AgentSession"
    secret = world.kube.find("Secret", NS, f"{stem}-agentctl-token")
    assert secret is not None
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "AgentSession"
    startup = world.status()["startup"]
    assert (startup["source"], startup["pool"], startup["member"]) == ("Claimed", POOL, stem)
    assert world.kube.find("Pod", NS, f"{NAME}-agent") is None, "no cold pod beside the claimed one"
    assert ("Normal", "PodClaimed") in world.events()

    # The pool refills, and counts the claim.
    await world.pools.reconcile(NS, POOL)
    assert len(world.members()) == 1
    assert world.pool_status()["claimed"] == 1


async def test_without_a_warm_pod_that_fits_the_session_starts_cold_and_says_why() -> None:
    world = PoolWorld()
    await world.apply(poolRef={"name": POOL})
    await world.reconcile()
    startup = world.status()["startup"]
    assert (startup["source"], startup["reason"]) == ("Cold", "PoolEmpty")
    assert world.kube.find("Pod", NS, f"{NAME}-agent") is not None
    assert ("Normal", "PoolEmpty") in world.events()

    mismatched = PoolWorld()
    await mismatched.make_pool(replicas=1)
    mismatched.ready_all()
    await mismatched.apply(poolRef={"name": POOL}, cwd="/elsewhere")
    await mismatched.reconcile()
    assert mismatched.status()["startup"]["reason"] == "PoolTemplateMismatch"
    assert len(mismatched.members()) == 1, "the warm pod stays in the pool"


async def test_a_session_asking_for_an_agentctl_image_not_allowed_claims_nothing_and_is_told_why() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=1)
    world.ready_all()
    await world.apply(poolRef={"name": POOL}, agentctl={"image": "evil.example/agentctl:1"})
    await world.reconcile()
    assert world.reasons()["Ready"] == "InvalidSpec"
    assert world.condition("Ready")["message"].startswith("spec.agentctl.image")  # type: ignore[index]
    assert len(world.members()) == 1, "the warm pod stays in the pool"
    assert world.kube.find("Pod", NS, f"{NAME}-agent") is None


async def test_of_two_sessions_racing_for_the_last_pod_exactly_one_wins() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=1)
    world.ready_all()
    seen_before = world.members()
    await world.apply(poolRef={"name": POOL})
    await world.reconcile()
    # The second session decided from the same, now outdated, view of the pool.
    await world.kube.create(
        {"apiVersion": API_VERSION, "kind": "AgentSession", "metadata": {"name": "s2", "namespace": NS},
         "spec": {"agent": {"type": "demo"}, "poolRef": {"name": POOL}}}
    )  # fmt: skip
    fresh = world.reconciler._pod_lookup
    world.reconciler._pod_lookup = lambda ns, label, value: (
        copy.deepcopy(seen_before) if label == LABEL_POOL else fresh(ns, label, value)
    )
    assert await world.reconciler.reconcile(NS, "s2") == CLAIM_RETRY_SECONDS, "a lost race is looked at again"
    (pod,) = seen_before
    claimed = world.kube.find("Pod", NS, pod["metadata"]["name"])
    assert claimed is not None
    assert claimed["metadata"]["labels"][LABEL_SESSION] == NAME
    s2 = world.kube.find("AgentSession", NS, "s2")
    assert s2 is not None
    assert (s2.get("status") or {}).get("startup", {}).get("source") is None, "s2 decides again"
    # Its next reconcile sees the pool as it is: empty, so it starts cold.
    world.reconciler._pod_lookup = fresh
    await world.reconciler.reconcile(NS, "s2")
    s2 = world.kube.find("AgentSession", NS, "s2")
    assert s2 is not None
    assert s2["status"]["startup"]["reason"] == "PoolEmpty"
    assert world.kube.find("Pod", NS, "s2-agent") is not None


async def test_a_claim_cut_short_is_finished_by_the_next_reconcile() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=1)
    world.ready_all()
    await world.apply(poolRef={"name": POOL})
    (member,) = world.members()
    session = SessionView(world.session())
    desired = claim_target(session.ref, session_spec(world), member, world.config)
    assert desired is not None
    # The operator wrote the pod's claim and stopped before the Secret and the status.
    await world.kube.patch(
        PODS, NS, member["metadata"]["name"], claim_patch(member, desired, session.ref, POOL)
    )
    assert await world.reconcile() == CLAIM_RETRY_SECONDS, "no pod event follows: it asks to come back"
    stem = stem_of(member)
    assert world.status()["startup"] == {"source": "Claimed", "pool": POOL, "member": stem}
    secret = world.kube.find("Secret", NS, f"{stem}-agentctl-token")
    assert secret is not None
    assert (
        secret["metadata"]["ownerReferences"] == adopt_patch(session.ref, POOL)["metadata"]["ownerReferences"]
    )
    assert world.kube.find("Pod", NS, f"{NAME}-agent") is None


async def test_a_pool_scales_down_and_up_and_replaces_outdated_pods() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=3)
    world.ready_all()
    await world.kube.patch(*_pool(), {"spec": {"replicas": 1}})
    await world.pools.reconcile(NS, POOL)
    assert len(world.members()) == 1
    before = world.members()[0]["metadata"]["name"]
    await world.kube.patch(*_pool(), {"spec": {"template": {"agent": {"type": "demo", "args": ["--x"]}}}})
    await world.pools.reconcile(NS, POOL)
    (after,) = world.members()
    assert after["metadata"]["name"] != before


async def test_refill_policy_never_lets_claims_shrink_the_pool() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=1, refillPolicy="Never")
    world.ready_all()
    await world.apply(poolRef={"name": POOL})
    await world.reconcile()
    await world.pools.reconcile(NS, POOL)
    assert world.members() == []
    assert world.pool_status()["claimed"] == 1


def _pool() -> tuple[Any, str, str]:
    from agentsession.kube.resources import AGENT_SESSION_POOLS

    return AGENT_SESSION_POOLS, NS, POOL


def session_spec(world: World) -> Any:
    from agentsession.api.models import AgentSessionSpec

    return AgentSessionSpec.model_validate(world.session()["spec"])


async def test_a_pool_starts_a_few_pods_at_a_time() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=5)
    assert len(world.members()) == REFILL_AT_ONCE
    world.ready_all()
    await world.pools.reconcile(NS, POOL)
    assert len(world.members()) == 2 * REFILL_AT_ONCE


async def test_a_never_refilled_pool_still_fills_up_a_few_at_a_time() -> None:
    world = PoolWorld()
    await world.make_pool(replicas=REFILL_AT_ONCE + 1, refillPolicy="Never")
    world.ready_all()
    await world.pools.reconcile(NS, POOL)
    assert len(world.members()) == REFILL_AT_ONCE + 1
