"""Warm pools against the in-memory API server: the pool keeps its pods, a session claims one (or starts cold and
says why), two sessions racing for one pod, a claim the operator was stopped in the middle of."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from prometheus_client import REGISTRY

from agentsession.api.constants import (
    API_VERSION,
    LABEL_CLAIMED_FROM,
    LABEL_POOL,
    LABEL_SESSION,
    POOL_KIND,
    SHAPE_HASH_ANNOTATION,
)
from agentsession.api.models import AgentSessionSpec, StartupTimings
from agentsession.api.session_ref import SessionRef
from agentsession.api.views import PodView, SessionView
from agentsession.controller.config import OperatorConfig
from agentsession.controller.decisions import ClaimPod
from agentsession.controller.pod_builder import build_pod, shape_hash
from agentsession.controller.pool_builder import adopt_patch, claim_patch, claim_target, stem_of
from agentsession.controller.pool_claim import choose, session_pod
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

    async def second_session_seeing(self, pool_pods: list[dict[str, Any]]) -> None:
        """A session "s2" of the same pool, whose reconcile sees the pool's pods as `pool_pods` (an outdated view)."""
        await self.kube.create(
            {"apiVersion": API_VERSION, "kind": "AgentSession", "metadata": {"name": "s2", "namespace": NS},
             "spec": {"agent": {"type": "demo"}, "poolRef": {"name": POOL}}}
        )  # fmt: skip
        self.reconciler._claims._pod_lookup = lambda ns, label, value: (
            copy.deepcopy(pool_pods) if label == LABEL_POOL else self.pods_labelled(ns, label, value)
        )

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
    await world.second_session_seeing(seen_before)
    assert await world.reconciler.reconcile(NS, "s2") == CLAIM_RETRY_SECONDS, "a lost race is looked at again"
    (pod,) = seen_before
    claimed = world.kube.find("Pod", NS, pod["metadata"]["name"])
    assert claimed is not None
    assert claimed["metadata"]["labels"][LABEL_SESSION] == NAME
    s2 = world.kube.find("AgentSession", NS, "s2")
    assert s2 is not None
    assert (s2.get("status") or {}).get("startup", {}).get("source") is None, "s2 decides again"
    # Its next reconcile sees the pool as it is: empty, so it starts cold.
    world.reconciler._claims._pod_lookup = world.pods_labelled
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


def _member(name: str, created: str, *, ready: bool = True, shape: str = "s") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{name}-agent", "creationTimestamp": created, "resourceVersion": "1",
                     "labels": {LABEL_POOL: POOL}, "annotations": {SHAPE_HASH_ANNOTATION: shape}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip


def test_a_pool_offers_its_oldest_fitting_ready_pods_else_says_why_the_session_starts_cold() -> None:
    config = OperatorConfig(image="agentsession:test")
    spec = AgentSessionSpec.model_validate({"agent": {"type": "demo"}, "poolRef": {"name": POOL}})
    session = SessionRef(NS, NAME, "u1", 1)
    fits = shape_hash(build_pod(replace(session, stem="warm-b"), spec, config))
    newer, older = (
        _member("warm-b", "2026-01-01T12:00:02Z", shape=fits),
        _member("warm-a", "2026-01-01T12:00:01Z"),
    )
    older["metadata"]["annotations"][SHAPE_HASH_ANNOTATION] = shape_hash(
        build_pod(replace(session, stem="warm-a"), spec, config)
    )
    offer = choose(session, spec, POOL, [newer, older], config, None)
    assert isinstance(offer, ClaimPod)
    assert [PodView(pod).name for pod, _ in offer.candidates] == ["warm-a-agent", "warm-b-agent"]
    assert [PodView(desired).name for _, desired in offer.candidates] == ["warm-a-agent", "warm-b-agent"]
    cases = [
        ([], "PoolEmpty", "pool warm has no warm pod (does it exist?); started cold"),
        (
            [_member("warm-c", "t", ready=False)],
            "PoolNotReady",
            "no warm pod of pool warm is ready yet; started cold",
        ),
        (
            [_member("warm-c", "t")],
            "PoolTemplateMismatch",
            "the warm pods of pool warm are not the pod this session",
        ),
    ]
    for members, reason, message in cases:
        cold = choose(session, spec, POOL, members, config, None)
        assert isinstance(cold, StartupTimings)
        assert (cold.source, cold.pool, cold.reason) == ("Cold", POOL, reason)
        assert cold.message is not None
        assert cold.message.startswith(message)


def test_the_session_pod_is_its_own_else_one_it_claimed_without_recording_it() -> None:
    session = SessionView({"metadata": {"name": NAME, "namespace": NS, "uid": "u1"}})
    own = {"metadata": {"name": f"{NAME}-agent"}}
    claimed = {"metadata": {"name": "warm-x-agent", "labels": {LABEL_CLAIMED_FROM: POOL},
                            "ownerReferences": [{"uid": "u1"}]}}  # fmt: skip
    others = {"metadata": {"name": "warm-y-agent", "labels": {LABEL_CLAIMED_FROM: POOL},
                           "ownerReferences": [{"uid": "older"}]}}  # fmt: skip
    assert session_pod(session, [claimed, own]) == (own, None)
    assert session_pod(session, [others, claimed]) == (claimed, (POOL, "warm-x"))
    assert session_pod(session, [others]) == (None, None)
    # A claim recorded in the status names the pod: no other is looked for.
    recorded = SessionView({**session.body, "status": {"startup": {"source": "Claimed", "member": "warm-z"}}})
    assert session_pod(recorded, [claimed]) == (None, None)
    assert session_pod(recorded, [{"metadata": {"name": "warm-z-agent"}}]) == (
        {"metadata": {"name": "warm-z-agent"}},
        None,
    )


def _count(name: str) -> float:
    """A pool's count in the operator's metrics (the process-wide default registry)."""
    return REGISTRY.get_sample_value(name, {"pool": POOL}) or 0.0


CLAIMS_TOTAL, CONFLICTS_TOTAL = "agentsession_pool_claims_total", "agentsession_pool_claim_conflicts_total"


async def test_a_claim_is_counted_by_pool_and_its_pod_and_children_are_the_sessions_at_once() -> None:
    claims, conflicts = _count(CLAIMS_TOTAL), _count(CONFLICTS_TOTAL)
    world = PoolWorld()
    await world.make_pool(replicas=1)
    world.ready_all()
    seen_before = world.members()
    (member,) = seen_before
    await world.apply(poolRef={"name": POOL})
    await world.reconcile()
    # The status written with the claim names the claimed pod, before any pod event brings the next reconcile.
    assert world.status()["podName"] == member["metadata"]["name"]
    secret = world.kube.find("Secret", NS, f"{stem_of(member)}-agentctl-token")
    assert secret is not None
    assert secret["metadata"]["labels"][LABEL_CLAIMED_FROM] == POOL
    assert (_count(CLAIMS_TOTAL), _count(CONFLICTS_TOTAL)) == (claims + 1, conflicts)
    # A second session that saw the same pod loses the race, and the conflict is counted for the pool.
    await world.second_session_seeing(seen_before)
    await world.reconciler.reconcile(NS, "s2")
    assert (_count(CLAIMS_TOTAL), _count(CONFLICTS_TOTAL)) == (claims + 1, conflicts + 1)
