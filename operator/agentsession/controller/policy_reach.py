"""What a NetworkPolicy lets a pod reach, read from the policy alone. Pure.

Some destinations must be proven unreachable without sending them a packet: a link-local or cloud metadata address
answers on real clouds, and a test must not depend on there being none. For a policy whose rules name peers only
by namespace and pod selectors (no ipBlock), an address that is not a pod's can match no rule, whichever address
it is; this module evaluates the rules as the NetworkPolicy API defines them, so tests ask it about each
destination. It covers what `network_policy.build_policy` writes, and refuses (ValueError) what it cannot judge
from the policy alone: ipBlock peers and named ports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentsession.api.manifest import Manifest

Labels = Mapping[str, str]


@dataclass(frozen=True)
class PodAt:
    """The pod that holds a destination address: its namespace, that namespace's labels and its own labels."""

    namespace: str
    labels: Labels = field(default_factory=dict)
    namespace_labels: Labels = field(default_factory=dict)


@dataclass(frozen=True)
class Destination:
    """An address and port; `pod` is the pod at that address, None when the address is no pod's (a node, the
    API server, a Service's virtual IP that is not translated, a link-local or metadata address, the internet)."""

    address: str
    port: int
    protocol: str = "TCP"
    pod: PodAt | None = None


def selects(selector: Manifest | None, labels: Labels) -> bool:
    """A label selector as the API defines it: every matchLabels pair and every expression must hold; an empty
    selector selects everything."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for term in selector.get("matchExpressions") or []:
        key, operator, values = term["key"], term["operator"], term.get("values") or []
        present = key in labels
        holds = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(operator)
        if holds is None:
            raise ValueError(f"unknown selector operator {operator!r}")
        if not holds:
            return False
    return True


def _port_matches(rule_ports: list[Manifest] | None, destination: Destination) -> bool:
    if not rule_ports:
        return True  # no ports: every port
    for entry in rule_ports:
        if entry.get("protocol", "TCP") != destination.protocol:
            continue
        port: Any = entry.get("port")
        if port is None:
            return True  # every port of that protocol
        if not isinstance(port, int):
            raise ValueError(f"named port {port!r}: its number depends on the destination pod's spec")
        end = entry.get("endPort", port)
        if port <= destination.port <= end:
            return True
    return False


def _peer_matches(peer: Manifest, policy_namespace: str, destination: Destination) -> bool:
    pod = destination.pod
    if pod is None:
        return False  # a peer of selectors only ever matches pods
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], pod.namespace_labels):
            return False
    elif pod.namespace != policy_namespace:
        return False  # a podSelector alone selects pods of the policy's own namespace
    return selects(peer.get("podSelector"), pod.labels)


def egress_allowed(policy: Manifest, source_labels: Labels, destination: Destination) -> bool:
    """Whether `policy` lets a pod with `source_labels` (in the policy's namespace) open a connection to
    `destination`. A pod the policy does not select, or a policy without Egress in its policyTypes, is not
    restricted by it (True); other policies of the namespace are not looked at."""
    spec = policy.get("spec") or {}
    if not selects(spec.get("podSelector"), source_labels):
        return True
    if "Egress" not in (spec.get("policyTypes") or []):
        return True
    namespace = str((policy.get("metadata") or {}).get("namespace") or "")
    for rule in spec.get("egress") or []:
        peers = rule.get("to")
        if any("ipBlock" in peer for peer in peers or []):
            raise ValueError("the policy has an ipBlock peer: what it allows depends on addresses, not on it")
        if not _port_matches(rule.get("ports"), destination):
            continue
        if not peers:
            return True  # no peers: every destination
        if any(_peer_matches(peer, namespace, destination) for peer in peers):
            return True
    return False
