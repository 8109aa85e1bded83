"""The kinds the operator and the gateway touch, and where the API serves each of them."""

from __future__ import annotations

from dataclasses import dataclass

from agentsession.api.constants import GROUP, KIND, PLURAL, POOL_KIND, POOL_PLURAL, VERSION


@dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    group: str = ""  # "" is the core group, served under /api/v1
    version: str = "v1"
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def custom(self) -> bool:
        """Served by the generic custom-objects API (the CRD), not by a generated typed API."""
        return self.group == GROUP


AGENT_SESSIONS = Resource(KIND, PLURAL, GROUP, VERSION)
AGENT_SESSION_POOLS = Resource(POOL_KIND, POOL_PLURAL, GROUP, VERSION)
PODS = Resource("Pod", "pods")
SECRETS = Resource("Secret", "secrets")
NAMESPACES = Resource("Namespace", "namespaces", namespaced=False)
CLAIMS = Resource("PersistentVolumeClaim", "persistentvolumeclaims")
EVENTS = Resource("Event", "events")
LEASES = Resource("Lease", "leases", "coordination.k8s.io")
NETWORK_POLICIES = Resource("NetworkPolicy", "networkpolicies", "networking.k8s.io")
SERVICES = Resource("Service", "services")
TOKEN_REVIEWS = Resource("TokenReview", "tokenreviews", "authentication.k8s.io", namespaced=False)
ACCESS_REVIEWS = Resource(
    "SubjectAccessReview", "subjectaccessreviews", "authorization.k8s.io", namespaced=False
)

BY_KIND: dict[str, Resource] = {
    r.kind: r
    for r in (
        AGENT_SESSIONS,
        AGENT_SESSION_POOLS,
        PODS,
        SECRETS,
        NAMESPACES,
        CLAIMS,
        EVENTS,
        LEASES,
        NETWORK_POLICIES,
        SERVICES,
        TOKEN_REVIEWS,
        ACCESS_REVIEWS,
    )
}


def resource_of(manifest: dict[str, object]) -> Resource:
    kind = str(manifest.get("kind"))
    try:
        return BY_KIND[kind]
    except KeyError:
        raise ValueError(f"kind {kind!r} is not one this client serves ({', '.join(BY_KIND)})") from None
