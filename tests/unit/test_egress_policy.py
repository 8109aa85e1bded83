"""The session pods' egress, proven from the NetworkPolicy the operator writes, not by sending packets: only the
release's egress proxy on its port and DNS in kube-system; never a link-local or metadata address, the API server,
another pod or the internet."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsession.controller.config import AgentctlNetworkPolicy, EgressProxy, OperatorConfig
from agentsession.controller.network_policy import build_policy, policy_keeper
from agentsession.controller.policy_reach import Destination, PodAt, egress_allowed, selects
from agentsession.kube.resources import NETWORK_POLICIES
from agentsession.testing.fake_kube import FakeKube

NS = "team-a"
RELEASE_NS = "agentsession-system"
SETTINGS = AgentctlNetworkPolicy(
    name="agentsession-agentctl",
    client_namespace=RELEASE_NS,
    client_labels={"app.kubernetes.io/name": "agentsession", "app.kubernetes.io/instance": "prod"},
)
PROXY = EgressProxy(service_namespace=RELEASE_NS, service_name="prod-egress-proxy", port=8080)
POLICY = build_policy(NS, SETTINGS, 9999, PROXY)
# What the session pods carry (pod_builder.labels), another session's included.
SESSION = {
    "app.kubernetes.io/name": "agentsession",
    "app.kubernetes.io/component": "agent",
    "agentsession.dev/name": "s1",
}
PROXY_POD = PodAt(
    RELEASE_NS,
    {"app.kubernetes.io/name": "agentsession", "app.kubernetes.io/instance": "prod",
     "app.kubernetes.io/component": "egress-proxy"},
    {"kubernetes.io/metadata.name": RELEASE_NS},
)  # fmt: skip
DNS_POD = PodAt("kube-system", {"k8s-app": "kube-dns"}, {"kubernetes.io/metadata.name": "kube-system"})


def _pod(namespace: str, **labels: str) -> PodAt:
    return PodAt(namespace, labels, {"kubernetes.io/metadata.name": namespace})


def test_the_policy_lets_session_pods_out_only_to_the_proxy_and_dns() -> None:
    spec = POLICY["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    to_proxy, to_dns = spec["egress"]
    (proxy_peer,) = to_proxy["to"]
    assert proxy_peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": RELEASE_NS}}
    assert {e["key"]: e["values"] for e in proxy_peer["podSelector"]["matchExpressions"]} == {
        "app.kubernetes.io/name": ["agentsession"],
        "app.kubernetes.io/instance": ["prod"],
        "app.kubernetes.io/component": ["egress-proxy"],
    }
    assert to_proxy["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert to_dns == {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    assert "ipBlock" not in str(spec)


def test_without_a_proxy_the_policy_leaves_egress_alone() -> None:
    policy = build_policy(NS, SETTINGS, 9999)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"]
    assert egress_allowed(policy, SESSION, Destination("169.254.169.254", 80))


@pytest.mark.parametrize(
    "destination",
    [
        Destination("10.0.5.3", 8080, pod=PROXY_POD),
        Destination("10.0.9.10", 53, "UDP", pod=DNS_POD),
        Destination("10.0.9.10", 53, "TCP", pod=DNS_POD),
    ],
    ids=["egress proxy", "dns udp", "dns tcp"],
)
def test_allowed(destination: Destination) -> None:
    assert egress_allowed(POLICY, SESSION, destination)


@pytest.mark.parametrize(
    "destination",
    [
        # Link-local and the clouds' metadata services (AWS/GCP/Azure 169.254.169.254, AWS IPv6, Alibaba).
        Destination("169.254.169.254", 80),
        Destination("169.254.169.254", 8080),
        Destination("169.254.169.254", 53, "UDP"),
        Destination("fd00:ec2::254", 80),
        Destination("100.100.100.200", 80),
        Destination("169.254.0.1", 443),
        # The API server: its Service address, its host-network endpoints.
        Destination("10.96.0.1", 443),
        Destination("198.18.0.1", 6443),
        Destination("10.96.0.1", 53),
        # The internet, directly; the model vendor's endpoint without the proxy.
        Destination("1.1.1.1", 443),
        Destination("8.8.8.8", 53, "UDP"),
        Destination("160.79.104.10", 443),
        # Other pods: another session's agentctl and agent, the gateway, the proxy on another port.
        Destination("10.0.1.8", 9999, pod=_pod(NS, **SESSION)),
        Destination("10.0.1.8", 8080, pod=_pod(NS, **SESSION)),
        Destination("10.0.2.9", 9999, pod=_pod("team-b", **SESSION)),
        Destination(
            "10.0.3.4",
            8090,
            pod=_pod(RELEASE_NS, **{**PROXY_POD.labels, "app.kubernetes.io/component": "gateway"}),
        ),
        Destination("10.0.5.3", 8093, pod=PROXY_POD),
        Destination("10.0.5.3", 8080, "UDP", pod=PROXY_POD),
        # Another release's proxy, and a pod that only claims to be a proxy in another namespace.
        Destination(
            "10.0.5.4",
            8080,
            pod=PodAt(
                RELEASE_NS,
                {**PROXY_POD.labels, "app.kubernetes.io/instance": "dev"},
                PROXY_POD.namespace_labels,
            ),
        ),
        Destination("10.0.6.5", 8080, pod=_pod(NS, **PROXY_POD.labels)),
        # kube-system on anything but DNS.
        Destination("10.0.9.10", 443, pod=DNS_POD),
        Destination("10.0.9.11", 6443, pod=_pod("kube-system", component="kube-apiserver")),
    ],
    ids=lambda d: f"{d.address}:{d.port}/{d.protocol}{' (pod)' if d.pod else ''}",
)
def test_denied(destination: Destination) -> None:
    assert not egress_allowed(POLICY, SESSION, destination)


def test_an_address_that_is_no_pods_is_reachable_on_no_port() -> None:
    # Whatever the address: a policy of selectors only matches pods, so metadata addresses are out by the policy.
    for port in (1, 53, 80, 443, 8080, 65535):
        for protocol in ("TCP", "UDP", "SCTP"):
            assert not egress_allowed(POLICY, SESSION, Destination("169.254.169.254", port, protocol))


def test_pods_the_policy_does_not_select_are_not_its_business() -> None:
    assert egress_allowed(POLICY, {"app": "other"}, Destination("169.254.169.254", 80))


def test_the_reading_follows_the_api_rules() -> None:
    """Checks of the evaluator itself: each would let a wrong policy pass the tests above."""
    open_rule = copy.deepcopy(POLICY)
    open_rule["spec"]["egress"].append({"ports": [{"protocol": "TCP", "port": 443}]})
    assert egress_allowed(open_rule, SESSION, Destination("169.254.169.254", 443))
    assert not egress_allowed(open_rule, SESSION, Destination("169.254.169.254", 80))
    any_port = copy.deepcopy(POLICY)
    any_port["spec"]["egress"].append({"to": [{"podSelector": {}}]})
    assert egress_allowed(any_port, SESSION, Destination("10.0.1.8", 9999, pod=_pod(NS, **SESSION)))
    assert not egress_allowed(any_port, SESSION, Destination("10.0.1.8", 9999, pod=_pod("team-b")))
    ranged = {"spec": {"podSelector": {}, "policyTypes": ["Egress"],
                       "egress": [{"ports": [{"port": 1000, "endPort": 2000}]}]}}  # fmt: skip
    assert egress_allowed(ranged, {}, Destination("1.1.1.1", 1500))
    assert not egress_allowed(ranged, {}, Destination("1.1.1.1", 2001))
    assert egress_allowed({"spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}}, {},
                          Destination("169.254.169.254", 80))  # fmt: skip
    assert not egress_allowed({"spec": {"podSelector": {}, "policyTypes": ["Egress"]}}, {},
                              Destination("10.0.5.3", 8080, pod=PROXY_POD))  # fmt: skip


@pytest.mark.parametrize(
    ("peer", "why"),
    [({"ipBlock": {"cidr": "0.0.0.0/0"}}, "ipBlock"), ({"podSelector": {}}, "named port")],
)
def test_what_the_policy_alone_cannot_say_is_refused(peer: dict[str, Any], why: str) -> None:
    policy = copy.deepcopy(POLICY)
    policy["spec"]["egress"].append({"to": [peer], "ports": [{"port": "http"}]})
    with pytest.raises(ValueError, match=why):
        egress_allowed(policy, SESSION, Destination("10.0.1.8", 80, pod=_pod(NS)))


def test_selectors() -> None:
    labels = {"a": "1", "b": "2"}
    assert selects({}, labels)
    assert selects({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}, labels)
    assert not selects({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, labels)
    assert selects({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "c", "operator": "Exists"}]}, labels)
    assert not selects({"matchLabels": {"a": "1", "b": "3"}}, labels)


async def test_the_keeper_writes_the_egress_rules_and_puts_them_back() -> None:
    config = OperatorConfig(
        agentctl_network_policy=SETTINGS,
        egress_proxy=PROXY,
        agentctl_key_file="/dev/null",
    )
    kube = FakeKube()
    keeper = policy_keeper(config, kube)
    assert keeper is not None
    await keeper.ensure(NS)
    stored = kube.find("NetworkPolicy", NS, SETTINGS.name)
    assert stored is not None
    assert stored["spec"] == POLICY["spec"]
    # Someone opens egress; the next check (after the recheck period) closes it again.
    await kube.patch(
        NETWORK_POLICIES, NS, SETTINGS.name, {"spec": {"policyTypes": ["Ingress"], "egress": None}}
    )
    fresh = policy_keeper(config, kube)
    assert fresh is not None
    await fresh.ensure(NS)
    restored = kube.find("NetworkPolicy", NS, SETTINGS.name)
    assert restored is not None
    assert restored["spec"] == POLICY["spec"]
