"""Who is calling: a phantom credential names a pod, and the call must come from that pod's IP while it lives.

Pure decisions over the `Directory`; the handlers turn a `Refusal` into the provider's error shape or a text 403.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from agentsession.api.egress import PHANTOM_PREFIX, phantom_digest
from agentsession.egress_proxy.directory import Directory, PodInfo, SessionInfo

# A pod can call as soon as its containers start, a moment before its address reaches the proxy's watch.
ADDRESS_GRACE_SECONDS: Final = 3.0
_RECHECK_SECONDS: Final = 0.05


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    type: str
    message: str
    pending: bool = False
    """A newer view of the cluster could turn it: the pod has no address yet, or the address is no pod yet."""


@dataclass(frozen=True, slots=True)
class Caller:
    pod: PodInfo
    session: SessionInfo


UNKNOWN = Refusal(
    401,
    "unknown_credential",
    "the API key is not one the egress proxy issued: use the key the session's pod was given",
)


def _bound(directory: Directory, pod: PodInfo) -> Caller | Refusal:
    where = f"pod {pod.namespace}/{pod.name}"
    if pod.deleting:
        return Refusal(403, "credential_not_bound", f"the credential is revoked: {where} is terminating")
    if pod.session is None:
        return Refusal(403, "not_claimed", f"{where} is a warm pool pod no session has claimed yet")
    session = directory.session(pod.namespace, pod.session)
    if session is None:
        return Refusal(
            403, "credential_not_bound", f"the session {pod.namespace}/{pod.session} of {where} is gone"
        )
    return Caller(pod, session)


def by_phantom(directory: Directory, phantom: str | None, peer: str | None) -> Caller | Refusal:
    """The caller of a model route, from the phantom it presents and the address it calls from."""
    if not phantom or not phantom.startswith(PHANTOM_PREFIX):
        return UNKNOWN
    digest = phantom_digest(phantom)
    pod = directory.pod_by_digest(digest)
    if pod is None:
        if directory.revoked(digest):
            return Refusal(403, "credential_not_bound", "the credential is revoked: its pod is gone")
        return UNKNOWN
    if pod.ip is None:
        return Refusal(
            403,
            "credential_not_bound",
            f"pod {pod.namespace}/{pod.name} has no address yet: try again in a moment",
            pending=True,
        )
    if peer is None or pod.ip != peer:
        return Refusal(
            403,
            "credential_not_bound",
            f"the credential belongs to pod {pod.namespace}/{pod.name} and is used from another address",
        )
    return _bound(directory, pod)


def by_address(directory: Directory, peer: str | None) -> Caller | Refusal:
    """The caller of the forward proxy and the git route: the live session pod at the calling address."""
    pods = [pod for pod in directory.pods_at(peer or "") if not pod.deleting] if peer else []
    claimed = [pod for pod in pods if pod.session is not None]
    if claimed:
        return _bound(directory, claimed[0])
    if pods:
        return _bound(directory, pods[0])
    return Refusal(403, "unknown_caller", "the calling address is not a session pod's", pending=True)


async def settled(
    decide: Callable[[], Caller | Refusal], grace: float = ADDRESS_GRACE_SECONDS
) -> Caller | Refusal:
    """`decide` again while its refusal is pending and the grace lasts: a new pod's first call is not refused
    for arriving before its address."""
    deadline = time.monotonic() + grace
    outcome = decide()
    while isinstance(outcome, Refusal) and outcome.pending and time.monotonic() < deadline:
        await asyncio.sleep(_RECHECK_SECONDS)
        outcome = decide()
    return outcome
