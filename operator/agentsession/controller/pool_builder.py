"""Pool → its warm pods, and which of them a session may claim. Pure functions.

A pool's pod ("member") is the pod a session with the pool's template would get, built by the same pod builder,
with the pool as its owner and labels that name the pool instead of a session. Its children (token Secret,
workspace claim) are named after the member's stem, `<pool>-<suffix>`, as a session's are after its name; a session
that claims the member keeps that stem (status.startup.member) for every pod it runs later.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass

from agentsession.api.constants import (
    LABEL_CLAIMED_FROM,
    LABEL_INSTANCE,
    LABEL_POOL,
    LABEL_SESSION,
    MEMBER_SUFFIX_LENGTH,
    POOL_KIND,
    SHAPE_HASH_ANNOTATION,
)
from agentsession.api.manifest import Manifest
from agentsession.api.models import AgentSessionSpec, PoolTemplate
from agentsession.api.session_ref import SessionRef, owner_reference
from agentsession.api.views import PodView
from agentsession.controller.config import OperatorConfig
from agentsession.controller.pod_builder import (
    SPEC_HASH_ANNOTATION,
    EgressRoute,
    SpecError,
    build_pod,
    build_token_secret,
    build_workspace_claim,
    shape_hash,
)

_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class PoolRef:
    namespace: str
    name: str
    uid: str

    def owner_reference(self) -> Manifest:
        return owner_reference(POOL_KIND, self.name, self.uid)


def new_stem(pool: str) -> str:
    return f"{pool}-{''.join(secrets.choice(_ALPHABET) for _ in range(MEMBER_SUFFIX_LENGTH))}"


def stem_of(pod: Manifest) -> str:
    """A member pod's stem: its name without the pod suffix."""
    return PodView(pod).name.removesuffix("-agent")


def _as_member(obj: Manifest, pool: PoolRef) -> Manifest:
    metadata = obj["metadata"]
    labels = {k: v for k, v in metadata.get("labels", {}).items() if k != LABEL_SESSION}
    metadata["labels"] = {**labels, LABEL_INSTANCE: pool.name, LABEL_POOL: pool.name}
    metadata["ownerReferences"] = [pool.owner_reference()]
    return obj


def build_member(
    pool: PoolRef,
    stem: str,
    template: PoolTemplate,
    config: OperatorConfig,
    token: str,
    egress: EgressRoute | None = None,
) -> list[Manifest]:
    """The children of one warm pod, in creation order: token Secret, workspace claim (if any), Pod. With an
    egress proxy, the pod's phantom (in `egress`) stays the pod's when a session claims it."""
    spec = template.session_spec()
    ref = SessionRef(pool.namespace, stem, pool.uid, stem=stem)
    children = [_as_member(build_token_secret(ref, token), pool)]
    claim = build_workspace_claim(ref, spec)
    if claim is not None:
        children.append(_as_member(claim, pool))
    pod = _as_member(build_pod(ref, spec, config, egress), pool)
    annotations = pod["metadata"]["annotations"]
    annotations.pop(SPEC_HASH_ANNOTATION, None)
    annotations[SHAPE_HASH_ANNOTATION] = shape_hash(pod)
    children.append(pod)
    return children


def member_current(
    pod: Manifest,
    template: PoolTemplate,
    pool: PoolRef,
    config: OperatorConfig,
    egress: EgressRoute | None = None,
) -> bool:
    """Whether a member was built from the pool's template as it is now (and for the proxy's address as it is:
    the shape leaves out only the phantom)."""
    ref = SessionRef(pool.namespace, stem_of(pod), pool.uid, stem=stem_of(pod))
    try:
        wanted = shape_hash(build_pod(ref, template.session_spec(), config, egress))
    except SpecError:
        return False
    return PodView(pod).annotation(SHAPE_HASH_ANNOTATION) == wanted


def claimable(pod: Manifest) -> bool:
    """A warm pod a session may take now: Ready (agentctl up, the agent initialized) and not on its way out."""
    view = PodView(pod)
    return not view.deleting and LABEL_POOL in view.labels and view.condition_true("Ready")


def claim_target(
    session: SessionRef,
    spec: AgentSessionSpec,
    pod: Manifest,
    config: OperatorConfig,
    egress: EgressRoute | None = None,
) -> Manifest | None:
    """The pod the session would run under the member's stem, if the member has its shape; else None, also when
    the session's spec makes no pod (the session's own reconcile says why)."""
    stem = stem_of(pod)
    try:
        desired = build_pod(
            SessionRef(session.namespace, session.name, session.uid, session.generation, stem),
            spec,
            config,
            egress,
        )
    except SpecError:
        return None
    return desired if shape_hash(desired) == PodView(pod).annotation(SHAPE_HASH_ANNOTATION) else None


def claim_patch(pod: Manifest, desired: Manifest, session: SessionRef, pool: str) -> Manifest:
    """Moves a member to the session in one write: labels, owner and the spec hash the session's pod has. The
    resourceVersion makes it conditional, so of two sessions that race for one pod exactly one wins."""
    labels: dict[str, str | None] = dict(desired["metadata"]["labels"])
    labels[LABEL_POOL] = None
    labels[LABEL_CLAIMED_FROM] = pool
    return {
        "metadata": {
            "resourceVersion": pod["metadata"]["resourceVersion"],
            "labels": labels,
            "ownerReferences": [session.owner_reference()],
            "annotations": {SPEC_HASH_ANNOTATION: desired["metadata"]["annotations"][SPEC_HASH_ANNOTATION]},
        }
    }


def adopt_patch(session: SessionRef, pool: str) -> Manifest:
    """The same move for the member's token Secret and workspace claim (no race left to lose by then)."""
    return {
        "metadata": {
            "labels": {LABEL_SESSION: session.name, LABEL_INSTANCE: session.name, LABEL_POOL: None,
                       LABEL_CLAIMED_FROM: pool},
            "ownerReferences": [session.owner_reference()],
        }
    }  # fmt: skip


def _ready(pod: Manifest) -> bool:
    return PodView(pod).condition_true("Ready")


def surplus(current: list[Manifest], target: int) -> list[Manifest]:
    """The members to remove to come down to `target`: those still starting first, then the newest."""
    if len(current) <= target:
        return []
    # Newest first within each group: the oldest ready pods have shown that they work.
    newest_first = sorted(current, key=created_at, reverse=True)
    order = [p for p in newest_first if not _ready(p)] + [p for p in newest_first if _ready(p)]
    return order[: len(current) - target]


def created_at(pod: Manifest) -> tuple[str, str]:
    view = PodView(pod)
    return (view.created_at or "", view.name)
