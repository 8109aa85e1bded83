"""RBAC, proven by the API server: the chart's roles are applied to a real cluster and each service account is
impersonated with `kubectl auth can-i --as`. Each must be able to do its job, and nothing more."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import pytest

from tests.support.chart import RBAC_KINDS, Cluster, accounts, installed

pytestmark = pytest.mark.cluster

AGS = "agentsessions.agentsession.dev"
POOLS = "agentsessionpools.agentsession.dev"
LEASES = "leases.coordination.k8s.io"

# (verb, resource, extra kubectl args) an account must be able to do in each namespace it serves.
OPERATOR_MUST = [
    ("get", AGS, ()),
    ("list", AGS, ()),
    ("watch", AGS, ()),
    ("patch", AGS, ()),
    ("patch", AGS, ("--subresource=status",)),
    ("get", POOLS, ()),
    ("list", POOLS, ()),
    ("watch", POOLS, ()),
    ("patch", POOLS, ()),
    ("patch", POOLS, ("--subresource=status",)),
    ("update", POOLS, ("--subresource=status",)),
    ("create", "pods", ()),
    ("patch", "pods", ()),
    ("delete", "pods", ()),
    ("watch", "pods", ()),
    ("get", "secrets", ()),
    ("create", "secrets", ()),
    ("patch", "secrets", ()),
    ("delete", "secrets", ()),
    ("create", "persistentvolumeclaims", ()),
    ("patch", "persistentvolumeclaims", ()),
    ("delete", "persistentvolumeclaims", ()),
    ("create", "events", ()),
    ("list", "events", ()),
    ("get", "networkpolicies.networking.k8s.io", ()),
    ("create", "networkpolicies.networking.k8s.io", ()),
    ("patch", "networkpolicies.networking.k8s.io", ()),
    # The layered budget: the served namespace's annotation.
    ("get", "namespaces", ()),
]
OPERATOR_MUST_NOT = [
    ("list", "secrets", ()),
    ("watch", "secrets", ()),
    ("update", "secrets", ()),
    ("delete", AGS, ()),
    ("create", AGS, ()),
    ("update", AGS, ()),
    ("delete", POOLS, ()),
    ("create", POOLS, ()),
    ("create", "pods", ("--subresource=exec",)),
    ("create", "deployments.apps", ()),
    ("create", "serviceaccounts", ("--subresource=token",)),
    ("create", "roles.rbac.authorization.k8s.io", ()),
    ("delete", "networkpolicies.networking.k8s.io", ()),
    ("list", "networkpolicies.networking.k8s.io", ()),
    ("update", "pods", ()),
    ("create", "pods", ("--subresource=ephemeralcontainers",)),
]
GATEWAY_MUST = [
    ("get", AGS, ()),
    ("list", AGS, ()),
    ("watch", AGS, ()),
    ("patch", AGS, ()),
]
# The gateway derives agentctl tokens from the release key (mounted by the kubelet): no Secret at all.
GATEWAY_MUST_NOT = [
    ("get", "secrets", ()),
    ("list", "secrets", ()),
    ("watch", "secrets", ()),
    ("create", "secrets", ()),
    ("patch", AGS, ("--subresource=status",)),
    ("create", AGS, ()),
    ("delete", AGS, ()),
    ("get", POOLS, ()),
    ("get", "pods", ()),
    ("create", "pods", ()),
    ("create", "pods", ("--subresource=exec",)),
    ("get", "configmaps", ()),
]
# The egress proxy: whose a phantom is (pods), the layered defaults (namespaces), a session's allowlist and budget,
# its usage (status), the real key from the session's credentials Secret (by name), and EgressDenied Events.
EGRESS_PROXY_MUST = [
    ("get", "pods", ()),
    ("list", "pods", ()),
    ("watch", "pods", ()),
    ("get", "namespaces", ()),
    ("get", AGS, ()),
    ("list", AGS, ()),
    ("watch", AGS, ()),
    ("get", AGS, ("--subresource=status",)),
    ("patch", AGS, ("--subresource=status",)),
    ("get", "secrets", ()),
    ("create", "events", ()),
    ("patch", "events", ()),
]
EGRESS_PROXY_MUST_NOT = [
    ("list", "secrets", ()),
    ("watch", "secrets", ()),
    ("create", "secrets", ()),
    ("patch", "secrets", ()),
    ("patch", AGS, ()),
    ("update", AGS, ()),
    ("create", AGS, ()),
    ("delete", AGS, ()),
    ("update", AGS, ("--subresource=status",)),
    ("get", POOLS, ()),
    ("create", "pods", ()),
    ("patch", "pods", ()),
    ("delete", "pods", ()),
    ("create", "pods", ("--subresource=exec",)),
    ("get", "configmaps", ()),
    ("create", "networkpolicies.networking.k8s.io", ()),
    ("delete", "events", ()),
]
# Cluster-scoped or all-namespace requests no account may make in any mode.
NOBODY_CLUSTER_WIDE = [
    ("list", "secrets", ("--all-namespaces",)),
    ("create", "clusterroles.rbac.authorization.k8s.io", ()),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ()),
    ("impersonate", "serviceaccounts", ()),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", ()),
    ("delete", "namespaces", ()),
    ("get", "nodes", ()),
    ("create", "certificatesigningrequests.certificates.k8s.io", ()),
]
REVIEWS = [
    ("create", "tokenreviews.authentication.k8s.io", ()),
    ("create", "subjectaccessreviews.authorization.k8s.io", ()),
]

Check = tuple[
    str, str, str, tuple[str, ...], str | None, bool
]  # account, verb, resource, args, namespace, expected


def egress_proxy_account(namespace: str, release: str) -> str:
    return f"system:serviceaccount:{namespace}:{release}-agentsession-egress-proxy"


def verify(cluster: Cluster, checks: list[Check]) -> None:
    """Runs every check (in parallel: each is one API round trip) and reports all the wrong answers at once."""

    def one(check: Check) -> str | None:
        account, verb, resource, args, namespace, expected = check
        actual = cluster.can_i(account, verb, resource, args, namespace)
        if actual == expected:
            return None
        where = f"in {namespace}" if namespace else "cluster-wide"
        return f"{account.rsplit(':', 1)[-1]} {'can' if actual else 'cannot'} {verb} {resource} {' '.join(args)} {where}"

    with ThreadPoolExecutor(max_workers=8) as pool:
        wrong = [w for w in pool.map(one, checks) if w]
    assert wrong == [], "RBAC differs from what each account needs:\n  " + "\n  ".join(wrong)


def expect(
    account: str, rules: list[tuple[str, str, tuple[str, ...]]], namespace: str | None, ok: bool
) -> list[Check]:
    return [(account, verb, resource, args, namespace, ok) for verb, resource, args in rules]


@pytest.fixture
def cluster(kubectl: str, kubeconfig: str, crd_installed: list[str]) -> Cluster:
    """The cluster, with the CRDs installed: `can-i` says no for a kind the API server does not serve."""
    return Cluster(kubectl, kubeconfig)


@pytest.fixture
def make_namespace(kube_api: Any) -> Iterator[Callable[[str], str]]:
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    made: list[str] = []

    def _make(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        made.append(name)
        return name

    yield _make
    for name in made:
        core.delete_namespace(name)


@pytest.fixture
def install_rbac(cluster: Cluster, helm: str) -> Iterator[Callable[..., str]]:
    """Applies only the chart's ServiceAccounts and RBAC objects, under a release name unique to the test."""
    with ExitStack() as stack:

        def _install(namespace: str, *sets: str) -> str:
            release, _ = stack.enter_context(installed(cluster, helm, namespace, RBAC_KINDS, *sets))
            return release

        yield _install


def test_cluster_scope(
    cluster: Cluster, install_rbac: Callable[..., str], namespace: str, make_namespace: Any
) -> None:
    elsewhere = make_namespace("rbac-other")
    release = install_rbac(namespace)
    operator, gateway = accounts(namespace, release)
    proxy = egress_proxy_account(namespace, release)
    checks: list[Check] = []
    for ns in (namespace, elsewhere):
        checks += expect(operator, OPERATOR_MUST, ns, True) + expect(operator, OPERATOR_MUST_NOT, ns, False)
        checks += expect(gateway, GATEWAY_MUST, ns, True) + expect(gateway, GATEWAY_MUST_NOT, ns, False)
        checks += expect(proxy, EGRESS_PROXY_MUST, ns, True) + expect(proxy, EGRESS_PROXY_MUST_NOT, ns, False)
    for account in (operator, gateway, proxy):
        checks += expect(account, NOBODY_CLUSTER_WIDE, None, False)
    checks += [
        (proxy, "watch", "pods", ("--all-namespaces",), None, True),
        (proxy, "watch", "namespaces", (), None, True),
        (proxy, "list", "secrets", ("--all-namespaces",), None, False),
    ]
    checks += expect(proxy, REVIEWS, None, False)
    checks += [
        (operator, "list", AGS, ("--all-namespaces",), None, True),
        (operator, "watch", POOLS, ("--all-namespaces",), None, True),
        (operator, "watch", "pods", ("--all-namespaces",), None, True),
        (operator, "watch", "customresourcedefinitions.apiextensions.k8s.io", (), None, True),
        # The egress proxy's Service, in the release namespace only.
        (operator, "watch", "services", (), namespace, True),
        (operator, "list", "services", (), elsewhere, False),
        (operator, "get", "services", ("--all-namespaces",), None, False),
        (gateway, "watch", AGS, ("--all-namespaces",), None, True),
        (gateway, "list", "secrets", ("--all-namespaces",), None, False),
        (gateway, "get", "secrets", ("--all-namespaces",), None, False),
        (gateway, "get", "secrets", (), "kube-system", False),
        # The release key is mounted into the gateway's pods by the kubelet: its account cannot read it.
        (gateway, "get", f"secrets/{release}-agentsession-agentctl-key", (), namespace, False),
        (
            operator,
            "get",
            "secrets",
            ("--all-namespaces",),
            None,
            True,
        ),  # by name, in any namespace it serves
    ]
    checks += expect(gateway, REVIEWS, None, True) + expect(operator, REVIEWS, None, False)
    verify(cluster, checks)


def test_namespace_scope(
    cluster: Cluster, install_rbac: Callable[..., str], namespace: str, make_namespace: Any
) -> None:
    watched = [make_namespace("rbac-team-a"), make_namespace("rbac-team-b")]
    elsewhere = make_namespace("rbac-other")
    release = install_rbac(namespace, "rbac.scope=namespace", f"watchNamespaces={{{','.join(watched)}}}")
    operator, gateway = accounts(namespace, release)
    proxy = egress_proxy_account(namespace, release)
    checks: list[Check] = []
    for ns in watched:
        checks += expect(operator, OPERATOR_MUST, ns, True) + expect(operator, OPERATOR_MUST_NOT, ns, False)
        checks += expect(gateway, GATEWAY_MUST, ns, True) + expect(gateway, GATEWAY_MUST_NOT, ns, False)
        checks += expect(proxy, EGRESS_PROXY_MUST, ns, True) + expect(proxy, EGRESS_PROXY_MUST_NOT, ns, False)
        # A Role reaches its own namespace's object only: never the list of namespaces.
        checks += [(proxy, "get", f"namespaces/{ns}", (), ns, True)]
    # Nothing outside the watched namespaces: not elsewhere, not in the release's own namespace.
    for ns in (elsewhere, namespace):
        checks += expect(operator, OPERATOR_MUST, ns, False) + expect(gateway, GATEWAY_MUST, ns, False)
        checks += expect(proxy, EGRESS_PROXY_MUST, ns, False)
    for account in (operator, gateway, proxy):
        checks += expect(account, NOBODY_CLUSTER_WIDE, None, False)
        checks += [
            (account, "list", AGS, ("--all-namespaces",), None, False),
            (account, "watch", "pods", ("--all-namespaces",), None, False),
            (account, "get", "secrets", ("--all-namespaces",), None, False),
            (account, "list", "namespaces", (), None, False),
            (account, "list", "customresourcedefinitions.apiextensions.k8s.io", (), None, False),
        ]
    # The egress proxy's Service, in the release namespace only.
    checks += [(operator, "watch", "services", (), namespace, True)]
    checks += [(operator, "list", "services", (), ns, False) for ns in (*watched, elsewhere)]
    checks += expect(gateway, REVIEWS, None, True) + expect(operator, REVIEWS, None, False)
    verify(cluster, checks)


def test_namespace_scope_without_gateway_auth_grants_nothing_cluster_wide(
    cluster: Cluster, install_rbac: Callable[..., str], namespace: str
) -> None:
    release = install_rbac(namespace, "rbac.scope=namespace", "gateway.auth.enabled=false")
    operator, gateway = accounts(namespace, release)
    checks = expect(operator, OPERATOR_MUST, namespace, True) + expect(gateway, GATEWAY_MUST, namespace, True)
    checks += expect(gateway, REVIEWS, None, False)
    verify(cluster, checks)


@pytest.mark.parametrize("scope", ["cluster", "namespace"])
def test_a_leader_elected_operator_may_touch_only_its_lease(
    cluster: Cluster, install_rbac: Callable[..., str], namespace: str, make_namespace: Any, scope: str
) -> None:
    watched = make_namespace("rbac-team")
    release = install_rbac(
        namespace, "operator.replicas=2", f"rbac.scope={scope}", f"watchNamespaces={{{watched}}}"
    )
    operator, gateway = accounts(namespace, release)
    lease = f"{LEASES}/{release}-agentsession-operator"
    other = f"{LEASES}/kube-controller-manager"
    checks: list[Check] = [
        (operator, "create", LEASES, (), namespace, True),
        (operator, "get", lease, (), namespace, True),
        (operator, "patch", lease, (), namespace, True),
        (operator, "update", lease, (), namespace, False),
        (operator, "delete", lease, (), namespace, False),
        (operator, "get", other, (), namespace, False),
        (operator, "patch", other, (), namespace, False),
        (operator, "list", LEASES, (), namespace, False),
        (operator, "watch", LEASES, (), namespace, False),
        (operator, "create", LEASES, (), watched, False),
        (operator, "patch", other, (), "kube-system", False),
        (gateway, "get", lease, (), namespace, False),
    ]
    verify(cluster, checks)
