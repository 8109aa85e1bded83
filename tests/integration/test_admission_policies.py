"""The chart's admission policies, enforced by a real API server: its RBAC and policies are applied from the
chart's templates, and requests are made as its service accounts (impersonation). Writes are server-side dry
runs: they pass through admission exactly as real ones, and leave nothing behind.

Before the policies, RBAC let the gateway patch any field of any AgentSession (a new image is code execution in
the session's namespace), and let the operator run a pod as any service account of any namespace, with its token
mounted, and create a service-account-token Secret and read the token back.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from agentsession.api.constants import API_VERSION, KIND
from agentsession.api.models import AgentSessionSpec, PoolTemplate
from agentsession.api.session_ref import SessionRef
from agentsession.controller.config import AgentctlNetworkPolicy, EgressProxy, OperatorConfig
from agentsession.controller.network_policy import build_policy
from agentsession.controller.pod_builder import build_pod, build_token_secret, build_workspace_claim
from agentsession.controller.pool_builder import PoolRef, build_member
from tests.conftest import installed_tool, wait_until
from tests.integration.conftest import fresh_namespace
from tests.support.chart import POLICY_KINDS, RBAC_KINDS, Cluster, accounts, installed
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import operator_process
from tests.support.release_key import token_of

pytestmark = pytest.mark.cluster

CONFIG = OperatorConfig(image="agentsession:dev")
OWNER_UID = "00000000-0000-0000-0000-000000000001"
Manifest = dict[str, Any]


@dataclass
class Release:
    cluster: Cluster
    namespace: str
    name: str
    operator: str
    gateway: str

    def write(self, who: str, verb: str, *args: str, body: Manifest | None = None) -> tuple[bool, str]:
        """(allowed, what the API server said) for a dry-run write as `who`."""
        stdin = json.dumps(body) if body is not None else None
        where = ["-n", self.namespace]
        proc = self.cluster.run(
            verb, *args, *where, "--dry-run=server", *(["-f", "-"] if body else []), stdin=stdin,
            check=False, as_=who,
        )  # fmt: skip
        return proc.returncode == 0, (proc.stderr or proc.stdout).strip()

    def refused_by_policy(self, who: str, verb: str, *args: str, body: Manifest | None = None) -> str:
        allowed, said = self.write(who, verb, *args, body=body)
        assert not allowed, f"{verb} {' '.join(args)} as {who.rsplit(':', 1)[-1]} was allowed"
        assert "ValidatingAdmissionPolicy" in said, f"refused, but not by a policy: {said}"
        return said

    def allowed(self, who: str, verb: str, *args: str, body: Manifest | None = None) -> None:
        allowed, said = self.write(who, verb, *args, body=body)
        assert allowed, f"{verb} {' '.join(args)} as {who.rsplit(':', 1)[-1]} was refused: {said}"


@pytest.fixture(scope="module")
def cluster(kubectl: str, kubeconfig: str) -> Cluster:
    return Cluster(kubectl, kubeconfig)


@pytest.fixture
def namespace(kube_api: Any, namespace_prefix: str) -> Iterator[str]:
    """The release's: a namespace that enforces no Pod Security level, as kube-system does not, so the policies
    must refuse what Pod Security admission would have let through there."""
    yield from fresh_namespace(kube_api, namespace_prefix, pod_security="privileged")


@pytest.fixture
def elsewhere(kube_api: Any, namespace_prefix: str) -> Iterator[str]:
    """Another namespace, which the chart knows nothing of: where cluster scope serves sessions too."""
    yield from fresh_namespace(kube_api, namespace_prefix, pod_security="privileged")


@pytest.fixture
def release(cluster: Cluster, namespace: str, crd_installed: list[str]) -> Iterator[Release]:
    """The chart's accounts, roles and admission policies, as `helm install` would create them."""
    with installed(cluster, installed_tool("helm"), namespace, (*RBAC_KINDS, *POLICY_KINDS)) as (name, _):
        operator, gateway = accounts(namespace, name)
        yield Release(cluster, namespace, name, operator, gateway)


def _session(cluster: Cluster, namespace: str, name: str = "victim") -> Manifest:
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": namespace},
            "spec": {"suspend": True, "agent": {"type": "demo", "env": [{"name": "A", "value": "1"}]}}}  # fmt: skip
    cluster.run("apply", "-f", "-", stdin=json.dumps(body))
    return body


def _policies_active(release: Release, probe: Callable[[], tuple[bool, str]]) -> None:
    """Policies reach the API server's admission a moment after they are created."""
    wait_until(
        "the admission policies in force", lambda: "ValidatingAdmissionPolicy" in probe()[1], timeout=30
    )


def _patch(spec: Manifest) -> tuple[str, ...]:
    return ("patch", "agentsessions.agentsession.dev/victim", "--type=merge", "-p", json.dumps(spec))


# ---------------------------------------------------------------- the gateway: spec.suspend only


def test_the_gateway_may_change_spec_suspend_and_nothing_else(release: Release) -> None:
    _session(release.cluster, release.namespace)
    image = _patch({"spec": {"agent": {"image": "evil.example/pwn:1"}}})
    _policies_active(release, lambda: release.write(release.gateway, *image))
    said = release.refused_by_policy(release.gateway, *image)
    assert "may change only spec.suspend" in said
    assert "spec.agent" in said
    for change in (
        {"spec": {"agent": {"env": [{"name": "A", "value": "$(curl evil)"}]}}},
        {"spec": {"agentctl": {"image": "evil.example/agentctl:1"}}},
        {"spec": {"podTemplate": {"nodeSelector": {"kubernetes.io/hostname": "control-plane"}}}},
        {"spec": {"suspend": False, "prompt": "rm -rf /"}},
        {"metadata": {"labels": {"agentsession.dev/pool": "x"}}},
        {"metadata": {"finalizers": ["evil.example/hold"]}},
    ):
        release.refused_by_policy(release.gateway, *_patch(change))
    # What the gateway does: resume and suspend.
    release.allowed(release.gateway, *_patch({"spec": {"suspend": False}}))
    release.allowed(release.gateway, *_patch({"spec": {"suspend": True}}))
    # The policy binds the gateway only: a user with the rights makes the same change.
    allowed, said = release.write("", *image)
    assert allowed, said


# ---------------------------------------------------------------- the operator: its own, restricted pods


def _operator_pod(namespace: str) -> Manifest:
    return build_pod(SessionRef(namespace, "s1", OWNER_UID), AgentSessionSpec(), CONFIG)


def _changed(pod: Manifest, change: Callable[[Manifest], None]) -> Manifest:
    copied = copy.deepcopy(pod)
    change(copied)
    return copied


def _another_account(spec: Manifest) -> None:
    spec["spec"]["serviceAccountName"] = "ci-deployer"
    spec["spec"]["automountServiceAccountToken"] = True


def _another_account_without_its_token(spec: Manifest) -> None:
    spec["spec"]["serviceAccountName"] = "ci-deployer"


def _privileged(spec: Manifest) -> None:
    spec["spec"]["containers"][0]["securityContext"]["privileged"] = True
    spec["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True


def _host_path(spec: Manifest) -> None:
    spec["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})


def _projected_token(spec: Manifest) -> None:
    source = {"serviceAccountToken": {"path": "token", "audience": "kubernetes"}}
    spec["spec"]["volumes"].append({"name": "sa", "projected": {"sources": [source]}})


def _root(spec: Manifest) -> None:
    spec["spec"]["initContainers"][0]["securityContext"]["runAsUser"] = 0
    spec["spec"]["initContainers"][0]["securityContext"]["runAsNonRoot"] = False


def _unlabelled(spec: Manifest) -> None:
    spec["metadata"]["labels"].pop("app.kubernetes.io/managed-by")


def _unowned(spec: Manifest) -> None:
    spec["metadata"].pop("ownerReferences")


def _host_network(spec: Manifest) -> None:
    spec["spec"]["hostNetwork"] = True


def _pinned_to_a_node(spec: Manifest) -> None:
    spec["spec"]["nodeName"] = "control-plane"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (_another_account, "default service account"),
        (_another_account_without_its_token, "default service account"),
        (_projected_token, "mounts no service account token"),
        (_unlabelled, "only its own pods"),
        (_unowned, "controlled by an AgentSession"),
        (_privileged, "unprivileged"),
        (_root, "non-root"),
        (_host_path, "volumes are"),
        (_host_network, "no host network"),
        (_pinned_to_a_node, "placed by the scheduler"),
    ],
)
def test_the_operator_creates_only_its_own_restricted_pods_without_a_token(
    release: Release, change: Callable[[Manifest], None], needle: str
) -> None:
    release.cluster.run("create", "serviceaccount", "ci-deployer", "-n", release.namespace)
    pod = _operator_pod(release.namespace)
    bad = _changed(pod, change)
    _policies_active(release, lambda: release.write(release.operator, "create", body=bad))
    assert needle in release.refused_by_policy(release.operator, "create", body=bad)
    # The pods it does make pass: a session's, and a pool's warm pod.
    release.allowed(release.operator, "create", body=pod)


def test_a_pool_pod_and_its_children_pass_and_an_existing_pod_keeps_its_spec(release: Release) -> None:
    ns = release.namespace
    pool = PoolRef(ns, "warm", OWNER_UID)
    children = build_member(
        pool, "warm-abcde", PoolTemplate.model_validate({"agent": {"type": "demo"}}), CONFIG, "t"
    )
    probe = _changed(children[-1], _host_network)
    _policies_active(release, lambda: release.write(release.operator, "create", body=probe))
    for child in children:
        release.allowed(release.operator, "create", body=child)
    # A pod that exists (made by an admin, never scheduled): the operator may move it to a session (metadata),
    # not change what it runs.
    pod = _operator_pod(ns)
    pod["spec"]["nodeSelector"] = NOWHERE
    pod["metadata"].pop("ownerReferences")
    release.cluster.run("create", "-f", "-", stdin=json.dumps(pod))
    name = f"pods/{pod['metadata']['name']}"
    relabel = {"metadata": {"labels": {"agentsession.dev/claimed-from": "warm"}}}
    release.allowed(release.operator, "patch", name, "--type=merge", "-p", json.dumps(relabel))
    image = {"spec": {"containers": [{"name": "agent", "image": "evil.example/pwn:1"}]}}
    said = release.refused_by_policy(
        release.operator, "patch", name, "--type=strategic", "-p", json.dumps(image)
    )
    assert "only the metadata" in said
    strip = {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}}
    release.refused_by_policy(release.operator, "patch", name, "--type=merge", "-p", json.dumps(strip))
    release.allowed(release.operator, "delete", name)


def test_pods_secrets_and_claims_that_are_not_the_operators_are_out_of_its_reach(release: Release) -> None:
    ns = release.namespace
    for kind, name in (("secret", "db-password"), ("pvc", "database"), ("pod", "web")):
        if kind == "secret":
            release.cluster.run("create", "secret", "generic", name, "--from-literal=password=x", "-n", ns)
        elif kind == "pvc":
            claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}  # fmt: skip
            release.cluster.run("create", "-f", "-", stdin=json.dumps(claim))
        else:
            web = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                   "spec": {"nodeSelector": NOWHERE, "automountServiceAccountToken": False,
                            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                                "seccompProfile": {"type": "RuntimeDefault"}},
                            "containers": [{"name": "c", "image": "busybox", "securityContext": {
                                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}  # fmt: skip
            release.cluster.run("create", "-f", "-", stdin=json.dumps(web))
    probe = ("delete", "secret/db-password")
    _policies_active(release, lambda: release.write(release.operator, *probe))
    for target in ("secret/db-password", "pvc/database", "pod/web"):
        release.refused_by_policy(release.operator, "delete", target)
        steal = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "agentsession-operator"}}}
        release.refused_by_policy(release.operator, "patch", target, "--type=merge", "-p", json.dumps(steal))
    # A service-account-token Secret would be filled with the token of the account it names: refused even with
    # the operator's labels.
    ref = SessionRef(ns, "s1", OWNER_UID)
    token = build_token_secret(ref, "t")
    minted = _changed(token, lambda s: s.update(type="kubernetes.io/service-account-token"))
    minted["metadata"]["annotations"] = {"kubernetes.io/service-account.name": "default"}
    minted.pop("data")
    assert "agentsession.dev/agentctl-token only" in release.refused_by_policy(
        release.operator, "create", body=minted
    )
    release.allowed(release.operator, "create", body=token)
    claim = build_workspace_claim(ref, AgentSessionSpec.model_validate({"workspace": {"size": "1Gi"}}))
    assert claim is not None
    release.allowed(release.operator, "create", body=claim)


def test_the_operators_network_policy_may_guard_session_pods_only(release: Release) -> None:
    settings = AgentctlNetworkPolicy(name=f"{release.name}-agentsession-agentctl", client_namespace=release.namespace,
                                     client_labels={"app.kubernetes.io/instance": release.name})  # fmt: skip
    policy = build_policy(release.namespace, settings, 9999)
    everything = _changed(policy, lambda p: p["spec"].update(podSelector={}))
    _policies_active(release, lambda: release.write(release.operator, "create", body=everything))
    assert "selects session pods only" in release.refused_by_policy(
        release.operator, "create", body=everything
    )
    release.allowed(release.operator, "create", body=policy)
    # With the egress proxy: egress to pods of named namespaces only. An address block, or every namespace, could
    # open session pods to what another policy closed.
    proxy = EgressProxy(service_namespace=release.namespace, service_name="proxy")
    guarded = build_policy(release.namespace, settings, 9999, proxy)
    guarded["metadata"]["name"] += "-egress"
    for widened in (
        _changed(guarded, lambda p: p["spec"]["egress"].append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]})),
        _changed(guarded, lambda p: p["spec"]["egress"].append({"to": [{"namespaceSelector": {}}]})),
        _changed(guarded, lambda p: p["spec"]["egress"].append({"ports": [{"port": 443}]})),
    ):
        assert "selects session pods only" in release.refused_by_policy(
            release.operator, "create", body=widened
        )
    release.allowed(release.operator, "create", body=guarded)


# ---------------------------------------------------------------- the real operator, as its own account


def _kubeconfig_of(cluster: Cluster, account: str, namespace: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the service account itself (a TokenRequest token), as in its pod."""
    name = account.rsplit(":", 1)[-1]
    token = cluster.run("create", "token", name, "-n", namespace, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [server],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": server["name"], "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_operator_does_its_work_within_the_policies(
    release: Release, elsewhere: str, kube_api: Any, tmp_path: Path, agentctl_port: int
) -> None:
    """Its own account, the chart's RBAC and policies, sessions in a namespace the chart does not know: sessions,
    the NetworkPolicy that guards them, pools, suspend all get through, nothing is refused."""
    ns = elsewhere
    kubeconfig = _kubeconfig_of(
        release.cluster, release.operator, release.namespace, tmp_path / "op.kubeconfig"
    )
    policy = AgentctlNetworkPolicy(name=f"{release.name}-agentsession-agentctl", client_namespace=release.namespace,
                                   client_labels={"app.kubernetes.io/instance": release.name})  # fmt: skip
    sessions = Sessions(kube_api, ns)
    settings = {
        "namespaces": json.dumps([ns]),
        "agentctl_network_policy": policy.model_dump_json(by_alias=True),
        "agentctl_host_override": "127.0.0.1",
        "agentctl_port": str(agentctl_port),
    }
    with operator_process(str(kubeconfig), tmp_path / "operator.log", **settings) as operator:
        sessions.create("within", {"podTemplate": {"nodeSelector": NOWHERE}, "workspace": {"size": "1Gi"}})
        wait_until("the session's pod", lambda: sessions.pod("within"), timeout=60)
        secret = sessions.core.read_namespaced_secret("within-agentctl-token", ns)
        assert secret.type == "agentsession.dev/agentctl-token"
        assert sessions.token("within") == token_of(ns, "within")
        guard = client.NetworkingV1Api(kube_api).read_namespaced_network_policy(policy.name, ns)
        assert guard.spec.pod_selector.match_labels == {
            "app.kubernetes.io/name": "agentsession", "app.kubernetes.io/component": "agent"
        }  # fmt: skip
        uid = sessions.pod("within").metadata.uid
        sessions.patch_spec("within", {"suspend": True})
        wait_until(
            "the suspended session's pod deleted", lambda: sessions.pod_gone("within", uid), timeout=60
        )
        pools = client.CustomObjectsApi(kube_api)
        pool = {"apiVersion": API_VERSION, "kind": "AgentSessionPool", "metadata": {"name": "warm"},
                "spec": {"replicas": 1, "template": {"podTemplate": {"nodeSelector": NOWHERE}}}}  # fmt: skip
        pools.create_namespaced_custom_object("agentsession.dev", "v1alpha1", ns, "agentsessionpools", pool)

        def members() -> list[Any]:
            return list(
                sessions.core.list_namespaced_pod(ns, label_selector="agentsession.dev/pool=warm").items
            )

        wait_until("a warm pod", lambda: members(), timeout=60)
        pools.patch_namespaced_custom_object(
            "agentsession.dev", "v1alpha1", ns, "agentsessionpools", "warm", {"spec": {"replicas": 0}}
        )
        wait_until("the warm pod removed", lambda: not [p for p in members() if not p.metadata.deletion_timestamp],
                   timeout=60)  # fmt: skip
        log = operator.output()
    assert "denied request" not in log, log[-3000:]
    assert "ValidatingAdmissionPolicy" not in log, log[-3000:]
