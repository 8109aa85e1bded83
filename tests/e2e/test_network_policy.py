"""NetworkPolicy is enforced on the node: what a policy denies is refused, and allowed again once it goes.

Real pods on the real node, the cluster's enforcer (on the local cluster kube-router, hack/cluster/up.sh) and
probe pods that connect on the test's behalf (tests/support/netprobe.py). The enforcer acts on a watch event, not
at once: each change is polled for until it shows, and the time it took must stay under POLICY_EFFECT_BOUND_S.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from tests.support.netprobe import (
    POLICY_EFFECT_BOUND_S,
    PROBE_PORT,
    allowed,
    api_server_addresses,
    denied,
    from_node,
    start_probes,
    until_outcome,
)

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]


def _policy(name: str, selector: dict[str, str], kind: str) -> dict[str, Any]:
    """A policy that isolates the selected pods for `kind` (Ingress or Egress) and allows nothing."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": [kind]},
    }


def test_a_connection_the_policy_denies_is_refused_and_allowed_again_once_the_policy_goes(
    kube_api: Any, namespace: str, project_image: str
) -> None:
    core = client.CoreV1Api(kube_api)
    server, visitor = start_probes(
        core,
        project_image,
        (namespace, "server", {"role": "server"}),
        (namespace, "visitor", {"role": "visitor"}),
    )
    until_outcome("the visitor reaching the server before any policy",
                  lambda: visitor.connect(server.ip, PROBE_PORT), allowed)  # fmt: skip

    net = client.NetworkingV1Api(kube_api)
    net.create_namespaced_network_policy(namespace, _policy("server-closed", {"role": "server"}, "Ingress"))
    outcome, took_deny = until_outcome(
        "the server's ingress closed", lambda: visitor.connect(server.ip, PROBE_PORT), denied
    )
    print(f"\npolicy created: {visitor} -> {server} {outcome} after {took_deny:.3f}s")
    assert outcome == "refused", "kube-router REJECTs what no policy allows; the client learns at once"
    # The node may always reach its pods, isolated or not: the kubelet's probes, operators and gateways run there.
    assert from_node(server.ip, PROBE_PORT) == "open"
    assert server.connect(visitor.ip, PROBE_PORT) == "open", (
        "the visitor is not isolated: its ingress is open"
    )

    net.delete_namespaced_network_policy("server-closed", namespace)
    outcome, took_allow = until_outcome(
        "the server's ingress open again", lambda: visitor.connect(server.ip, PROBE_PORT), allowed
    )
    print(f"policy deleted: {visitor} -> {server} {outcome} after {took_allow:.3f}s")
    assert max(took_deny, took_allow) < POLICY_EFFECT_BOUND_S


def test_a_pod_under_default_deny_egress_reaches_neither_the_api_server_nor_another_pod(
    kube_api: Any, namespace: str, project_image: str
) -> None:
    core = client.CoreV1Api(kube_api)
    fenced, free, server = start_probes(
        core,
        project_image,
        (namespace, "fenced", {"egress": "none"}),
        (namespace, "free", {"egress": "any"}),
        (namespace, "server", {"role": "server"}),
    )
    targets = [*api_server_addresses(kube_api), (server.ip, PROBE_PORT)]
    print(f"\ntargets: {targets}")
    for host, port in targets:
        until_outcome(f"{fenced} reaching {host}:{port} before any policy",
                      lambda h=host, p=port: fenced.connect(h, p), allowed)  # type: ignore[misc]  # fmt: skip

    client.NetworkingV1Api(kube_api).create_namespaced_network_policy(
        namespace, _policy("no-egress", {"egress": "none"}, "Egress")
    )
    took = []
    for host, port in targets:
        outcome, seconds = until_outcome(
            f"{fenced} cut off from {host}:{port}",
            lambda h=host, p=port: fenced.connect(h, p),  # type: ignore[misc]
            denied,
        )
        print(f"{fenced} -> {host}:{port}: {outcome} after {seconds:.3f}s")
        took.append(seconds)
        assert free.connect(host, port) == "open", f"{free} has no egress policy and must reach {host}:{port}"
    assert max(took) < POLICY_EFFECT_BOUND_S
    # Egress isolation leaves its ingress alone: the node and other pods still reach it.
    assert from_node(fenced.ip, PROBE_PORT) == "open"
    assert free.connect(fenced.ip, PROBE_PORT) == "open"
