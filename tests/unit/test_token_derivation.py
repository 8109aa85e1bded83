"""The operator and the gateway derive the same agentctl token from the release key, before and after a session
claims a pool's warm pod: the pod's Secret is written once, when the pool makes the pod, and never read by the
gateway."""

from __future__ import annotations

import base64

from agentsession.api.constants import TOKEN_KEY
from agentsession.controller.pool_builder import stem_of
from agentsession.controller.pool_reconciler import PoolReconciler
from agentsession.controller.reconciler import Reconciler
from agentsession.gateway.agents import AgentRegistry
from agentsession.gateway.watch_cache import SessionCache
from agentsession.testing.fake_agentctl import FakeAgentctlConnector
from tests.support.release_key import token_of
from tests.unit.test_pool import POOL, PoolWorld
from tests.unit.test_reconciler import NAME, NS, Kubelet


def _with_the_release_key(world: PoolWorld) -> PoolWorld:
    world.reconciler = Reconciler(world.config, world.kube, world.agentctls, world.pods_labelled, token_of,
                                  clock=world.clock)  # fmt: skip
    world.pools = PoolReconciler(world.config, world.kube, world.pods_labelled, token_of)
    return world


async def test_a_claimed_pods_token_is_the_one_both_derive_before_and_after_the_claim() -> None:
    world = _with_the_release_key(PoolWorld())
    await world.make_pool(replicas=1)
    world.ready_all()
    (member,) = world.members()
    stem = stem_of(member)
    secret = world.kube.find("Secret", NS, f"{stem}-agentctl-token")
    assert secret is not None
    before = base64.b64decode(secret["data"][TOKEN_KEY]).decode()
    assert before == token_of(NS, stem), "written when the pool made the pod"

    await world.apply(poolRef={"name": POOL})
    await world.reconcile()
    # The kubelet reports the claimed pod's agentctl ready, and the operator starts ACP on it.
    kubelet = Kubelet(world.kube)
    kubelet.pod = lambda: world.kube.find("Pod", NS, f"{stem}-agent") or {}  # type: ignore[method-assign]
    kubelet.run()
    await world.reconcile()
    assert world.status()["startup"]["member"] == stem
    assert world.status()["acp"]["sessionId"], world.reasons()
    secret = world.kube.find("Secret", NS, f"{stem}-agentctl-token")
    assert secret is not None
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "AgentSession", (
        "the Secret moved to the session"
    )
    assert base64.b64decode(secret["data"][TOKEN_KEY]).decode() == before, "and kept its token"
    # The operator started ACP with it.
    assert {token for _, token in world.agentctls.connections} == {before}

    # The gateway, from the session object alone: no Secret read, the same token.
    gateway_agentctls = FakeAgentctlConnector()
    cache = SessionCache(world.kube, [NS], inactivity_timeout=5, server_timeout=60)
    registry = AgentRegistry(cache, world.kube, gateway_agentctls, token_of)
    calls_before = len(world.kube.calls)
    cache.start()
    try:
        await cache.wait_synced()
        await registry.links.ready_client(registry.session((NS, NAME)))
        assert [token for _, token in gateway_agentctls.connections] == [before]
        assert [c for c in world.kube.calls[calls_before:] if c.kind == "Secret"] == []
    finally:
        await registry.close()
        await cache.stop()
