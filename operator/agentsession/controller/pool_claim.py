"""A session's claim of a warm pod of its pool: which pod is the session's, what its pool offers, and taking it.

The session's reconcile meets pools here only: while observing, `session_pod` (a claim the operator was stopped in
the middle of included) and `PoolClaims.offer` (a `ClaimPod`, or a cold start and why); while acting, one call,
`PoolClaims.take`, carries out the plan's `ClaimPod` or `AdoptChildren`. Which pods fit and the patches that move
them are `pool_builder`'s; when to claim at all is `decisions.first_start`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from agentsession.api.constants import (
    LABEL_CLAIMED_FROM,
    LABEL_POOL,
    pod_name,
    token_secret_name,
    workspace_claim_name,
)
from agentsession.api.manifest import Manifest
from agentsession.api.models import AgentSessionSpec, StartupTimings
from agentsession.api.session_ref import SessionRef
from agentsession.api.views import PodView, SessionView
from agentsession.controller import metrics
from agentsession.controller.config import OperatorConfig
from agentsession.controller.decisions import AdoptChildren, ClaimPod, claimed_start
from agentsession.controller.pod_builder import EgressRoute
from agentsession.controller.pool_builder import (
    adopt_patch,
    claim_patch,
    claim_target,
    claimable,
    created_at,
    stem_of,
)
from agentsession.controller.transitions import Event
from agentsession.kube.client import Kube
from agentsession.kube.errors import Conflict, NotFound
from agentsession.kube.resources import CLAIMS, PODS, SECRETS

# The pods of a namespace that carry a label with a value, from the operator's watch (kopf's indexes).
PodLookup = Callable[[str, str, str], list[Manifest]]
# Posts an Event on the session (the reconciler's, which counts it).
Announce = Callable[[SessionRef, Event], Awaitable[None]]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Taken:
    """A warm pod that is the session's now, and how its first pod came (status.startup)."""

    pod: Manifest
    start: StartupTimings


def session_pod(
    session: SessionView, pods: Sequence[Manifest]
) -> tuple[Manifest | None, tuple[str, str] | None]:
    """The session's pod among `pods` (those labelled with its name), and, when it is a pod the session claimed
    whose claim is not in the status yet (the operator stopped in between), its pool and stem."""
    stem = session.ref.children
    pod = next((p for p in pods if PodView(p).name == pod_name(stem)), None)
    if pod is not None or stem != session.name:
        return pod, None
    claimed = next((p for p in pods if _claimed_by(p, session.uid)), None)
    if claimed is None:
        return None, None
    return claimed, (PodView(claimed).labels[LABEL_CLAIMED_FROM], stem_of(claimed))


def _claimed_by(pod: Manifest, uid: str) -> bool:
    view = PodView(pod)
    return LABEL_CLAIMED_FROM in view.labels and view.owned_by(uid)


def choose(
    session: SessionRef,
    spec: AgentSessionSpec,
    pool: str,
    members: Sequence[Manifest],
    config: OperatorConfig,
    egress: EgressRoute | None,
) -> ClaimPod | StartupTimings:
    """A claim of one of the pool's warm pods that has the session's pod shape, oldest first; else a cold start
    and why."""
    ready = sorted((p for p in members if claimable(p)), key=created_at)
    candidates = tuple(
        (pod, desired)
        for pod in ready
        if (desired := claim_target(session, spec, pod, config, egress)) is not None
    )
    if candidates:
        return ClaimPod(pool, candidates)
    if ready:
        reason, message = (
            "PoolTemplateMismatch",
            f"the warm pods of pool {pool} are not the pod this session asks for (its agent, agentctl, "
            "workspace, cwd, lifecycle and podTemplate must equal the pool's template); started cold",
        )
    elif members:
        reason, message = "PoolNotReady", f"no warm pod of pool {pool} is ready yet; started cold"
    else:
        reason, message = "PoolEmpty", f"pool {pool} has no warm pod (does it exist?); started cold"
    return StartupTimings(source="Cold", pool=pool, reason=reason, message=message)


class PoolClaims:
    """The I/O of claiming: the pool's pods as the operator's watch has them, and the writes that move one."""

    def __init__(self, config: OperatorConfig, kube: Kube, pod_lookup: PodLookup, announce: Announce) -> None:
        self._config = config
        self._kube = kube
        self._pod_lookup = pod_lookup
        self._announce = announce

    def offer(
        self, session: SessionRef, spec: AgentSessionSpec, egress: EgressRoute | None
    ) -> ClaimPod | StartupTimings | None:
        """What spec.poolRef's pool offers the session's first pod; None without a poolRef."""
        if spec.poolRef is None:
            return None
        pool = spec.poolRef.name
        members = self._pod_lookup(session.namespace, LABEL_POOL, pool)
        return choose(session, spec, pool, members, self._config, egress)

    async def take(self, session: SessionRef, action: ClaimPod | AdoptChildren) -> Taken | None:
        """Carries out a claim of the plan: the first candidate no other session takes first becomes the session's
        (None when every one was taken: the next reconcile, the pool's pods changed, decides again), or the
        children of a pod claimed already follow it (None: the pod is the observed one)."""
        if isinstance(action, AdoptChildren):
            await self._adopt(session, action.pool)
            return None
        for pod, desired in action.candidates:
            name = PodView(pod).name
            try:
                taken = await self._kube.patch(
                    PODS, session.namespace, name, claim_patch(pod, desired, session, action.pool)
                )
            except (Conflict, NotFound):
                metrics.POOL_CLAIM_CONFLICTS.labels(pool=action.pool).inc()
                continue
            stem = stem_of(taken)
            await self._adopt(replace(session, stem=stem), action.pool)
            metrics.POOL_CLAIMS.labels(pool=action.pool).inc()
            message = f"claimed warm pod {name} of pool {action.pool}"
            await self._announce(session, Event("Normal", "PodClaimed", message))
            return Taken(taken, claimed_start(action.pool, stem))
        log.info("every warm pod of pool %s that %s/%s could take was taken first", action.pool, *session.key)
        return None

    async def _adopt(self, session: SessionRef, pool: str) -> None:
        """The claimed pod's token Secret and workspace claim become the session's, so deleting the pool (which
        owns what it has not given away) leaves them."""
        patch = adopt_patch(session, pool)
        for resource, name in (
            (SECRETS, token_secret_name(session.children)),
            (CLAIMS, workspace_claim_name(session.children)),
        ):
            with contextlib.suppress(NotFound):
                await self._kube.patch(resource, session.namespace, name, patch)
