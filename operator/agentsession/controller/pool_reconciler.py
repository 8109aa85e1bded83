"""One idempotent reconcile of one AgentSessionPool: keep `replicas` warm pods of its template, report them.

Warm pods come and go by events: a claim takes a pod out of the pool (its labels change), the kubelet makes a new
one Ready, a template change makes the old ones outdated. Each of those triggers this same function, which counts
what is there and creates or deletes the difference.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from pydantic import ValidationError

from agentsession.api.constants import (
    LABEL_CLAIMED_FROM,
    LABEL_POOL,
    pod_name,
    token_secret_name,
    workspace_claim_name,
)
from agentsession.api.egress import new_phantom
from agentsession.api.manifest import Manifest
from agentsession.api.models import AgentSessionPoolSpec, AgentSessionPoolStatus
from agentsession.api.times import parse_time
from agentsession.api.views import PodView
from agentsession.controller import metrics
from agentsession.controller.config import OperatorConfig
from agentsession.controller.network_policy import policy_keeper
from agentsession.controller.pod_builder import EgressRoute, SpecError, egress_route
from agentsession.controller.pool_builder import (
    PoolRef,
    build_member,
    claimable,
    member_current,
    new_stem,
    stem_of,
    surplus,
)
from agentsession.controller.pool_claim import PodLookup
from agentsession.controller.reconciler import TokenOf
from agentsession.kube.client import Kube
from agentsession.kube.errors import KubeError, NotFound
from agentsession.kube.ops import create_or_read
from agentsession.kube.resources import AGENT_SESSION_POOLS, CLAIMS, PODS, SECRETS

log = logging.getLogger(__name__)
# Warm pods started at once. A pod's start is mostly CPU (two interpreters loading); refilling a whole burst of
# claims at once would take the CPU the claimed sessions need to start their ACP sessions. The next starts follow
# as these turn ready (each a pod event).
REFILL_AT_ONCE = 2


class PoolReconciler:
    def __init__(
        self,
        config: OperatorConfig,
        kube: Kube,
        pod_lookup: PodLookup,
        token_of: TokenOf,
        proxy_address: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._config = config
        self._kube = kube
        self._pods = pod_lookup
        self._token_of = token_of
        self._proxy_address = proxy_address
        self._policies = policy_keeper(config, kube)
        # Members whose refill time was observed already (their Ready is seen on every later event too).
        self._refilled: set[str] = set()

    async def reconcile(self, namespace: str, name: str) -> float | None:
        try:
            body = await self._kube.get(AGENT_SESSION_POOLS, namespace, name)
        except NotFound:
            # The garbage collector removes the warm pods it owned; claimed ones belong to their sessions.
            return None
        meta = body["metadata"]
        if meta.get("deletionTimestamp"):
            return None
        try:
            spec = AgentSessionPoolSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            log.warning("pool %s/%s has a spec the operator cannot read: %s", namespace, name, error)
            return None
        pool = PoolRef(namespace, name, str(meta["uid"]))
        generation = int(meta.get("generation") or 0)
        previous = AgentSessionPoolStatus.model_validate(body.get("status") or {})
        members = [
            p
            for p in self._pods(namespace, LABEL_POOL, name)
            if PodView(p).owned_by(pool.uid) and not PodView(p).deleting
        ]
        route = self._route()
        current = [p for p in members if member_current(p, spec.template, pool, self._config, route)]
        outdated = [p for p in members if p not in current]
        # With refillPolicy Never, claims shrink the pool once it was full; a new spec (replicas, template) fills it
        # again. observedGeneration is the generation the pool was last full for.
        refill = spec.refillPolicy == "Always" or previous.observedGeneration != generation
        target = spec.replicas if refill else min(spec.replicas, len(current))
        extra = surplus(current, target)
        for pod in [*outdated, *extra]:
            await self._remove(pool, pod)
        kept = [p for p in current if p not in extra]
        starting = sum(not claimable(p) for p in kept)
        try:
            for _ in range(min(target - len(kept), max(0, REFILL_AT_ONCE - starting))):
                kept.append(await self._add(pool, spec))
        except SpecError as error:
            log.warning("pool %s/%s: its template makes no pod: %s", namespace, name, error)
        except KubeError as error:
            log.warning("pool %s/%s: creating a warm pod failed: %s; retrying", namespace, name, error)
            await self._report(pool, previous, kept, previous.observedGeneration)
            return 10.0
        self._observe_refills(name, kept)
        full = len(kept) >= target
        await self._report(pool, previous, kept, generation if full else previous.observedGeneration)
        return None

    async def _add(self, pool: PoolRef, spec: AgentSessionPoolSpec) -> Manifest:
        if self._policies is not None:
            await self._policies.ensure(pool.namespace)
        stem = new_stem(pool.name)
        # Named after the stem, which the claiming session keeps: its token is the same before and after a claim.
        token = self._token_of(pool.namespace, stem)
        children = build_member(pool, stem, spec.template, self._config, token, self._route())
        pod: Manifest = {}
        for child in children:
            pod, _ = await create_or_read(self._kube, child)
        log.info("pool %s/%s: created warm pod %s", pool.namespace, pool.name, pod["metadata"]["name"])
        return pod

    def _route(self) -> EgressRoute | None:
        """Each warm pod gets a phantom of its own, which the session that claims it keeps."""
        return egress_route(self._config, self._proxy_address(), new_phantom())

    async def _remove(self, pool: PoolRef, pod: Manifest) -> None:
        stem = stem_of(pod)
        for resource, name in (
            (PODS, pod_name(stem)),
            (SECRETS, token_secret_name(stem)),
            (CLAIMS, workspace_claim_name(stem)),
        ):
            with contextlib.suppress(NotFound):
                await self._kube.delete(resource, pool.namespace, name)
        log.info("pool %s/%s: removed warm pod %s", pool.namespace, pool.name, pod_name(stem))

    def _observe_refills(self, pool: str, members: list[Manifest]) -> None:
        for pod in members:
            view = PodView(pod)
            if view.name in self._refilled or not claimable(pod):
                continue
            self._refilled.add(view.name)
            created = parse_time(view.created_at)
            condition = view.condition("Ready")
            ready = parse_time(condition.last_transition_time) if condition else None
            if created and ready:
                metrics.POOL_REFILL_SECONDS.labels(pool=pool).observe((ready - created).total_seconds())

    async def _report(
        self, pool: PoolRef, previous: AgentSessionPoolStatus, members: list[Manifest], filled: int | None
    ) -> None:
        ready = sum(claimable(p) for p in members)
        claimed = len(self._pods(pool.namespace, LABEL_CLAIMED_FROM, pool.name))
        metrics.POOL_PODS.labels(pool=pool.name, state="ready").set(ready)
        metrics.POOL_PODS.labels(pool=pool.name, state="starting").set(len(members) - ready)
        status = AgentSessionPoolStatus(
            replicas=len(members), readyReplicas=ready, claimed=claimed, observedGeneration=filled
        )
        if status == previous:
            return
        with contextlib.suppress(NotFound):
            await self._kube.patch(
                AGENT_SESSION_POOLS,
                pool.namespace,
                pool.name,
                {"status": status.model_dump(mode="json")},
                status=True,
            )
