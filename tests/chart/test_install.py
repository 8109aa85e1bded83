"""`helm install` on a real cluster: the operator and the gateway come up, a demo session reaches Ready in a
namespace that enforces the `restricted` Pod Security Standard, `helm test` passes, and `helm uninstall` leaves
nothing behind but the CRDs.

One release serves the module's tests, which run in file order; the last one uninstalls it. The release serves
only its session namespace (`watchNamespaces`), so it never acts on other tests' sessions in a shared cluster.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.chart.conftest import CHART, run_helm
from tests.conftest import REPO_ROOT
from tests.gateway.conftest import service_account_token
from tests.support.plugin import install_plugin, plugin_path, run_plugin

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

READY_TIMEOUT = "240s"
CRD_NAMES = ("agentsessions.agentsession.dev", "agentsessionpools.agentsession.dev")


@dataclass
class Release:
    name: str
    namespace: str
    sessions: str
    helm: str
    kubectl: str
    kubeconfig: str
    scope: str
    uninstalled: bool = False

    def k(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.kubectl, "--kubeconfig", self.kubeconfig, *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}", pytrace=False)
        return proc

    def diagnostics(self) -> str:
        out = []
        for ns in (self.namespace, self.sessions):
            out.append(self.k("get", "pods,ags,events", "-n", ns, "-o", "wide", check=False).stdout)
        for component in ("operator", "gateway"):
            deploy = f"deploy/{self.name}-agentsession-{component}"
            out.append(self.k("logs", "-n", self.namespace, deploy, "--tail=40", check=False).stdout)
        return "\n".join(out)

    def uninstall(self) -> subprocess.CompletedProcess[str]:
        self.uninstalled = True
        return run_helm(self.helm, "uninstall", self.name, "--kubeconfig", self.kubeconfig, "--namespace",
                        self.namespace, "--wait", "--timeout", "120s", check=False, timeout=180)  # fmt: skip


def _split_image(ref: str) -> tuple[str, str]:
    repository, _, tag = ref.rpartition(":")
    if not repository or "/" in tag:
        return ref, "latest"
    return repository, tag


@pytest.fixture(scope="module")
def restricted_namespaces(kube_api: Any) -> Iterator[tuple[str, str]]:
    """(release namespace, session namespace), both enforcing `restricted`: every pod must be admitted there."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    suffix = uuid.uuid4().hex[:6]
    names = (f"chart-{suffix}", f"chart-sessions-{suffix}")
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
        "app.kubernetes.io/part-of": "agentsession-tests",
    }
    for name in names:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    yield names
    for name in names:
        core.delete_namespace(name)


@pytest.fixture(scope="module", params=["cluster", "namespace"])
def release(
    request: pytest.FixtureRequest,
    helm: str,
    kubectl: str,
    kubeconfig: str,
    project_image: str,
    restricted_namespaces: tuple[str, str],
) -> Iterator[Release]:
    """The chart installed with `rbac.scope` cluster, then namespace (Roles in the session namespace only)."""
    namespace, sessions = restricted_namespaces
    rel = Release(f"it-{uuid.uuid4().hex[:6]}", namespace, sessions, helm, kubectl, kubeconfig, request.param)
    repository, tag = _split_image(project_image)
    # Other tests keep the CRDs applied (and current) in a shared cluster; Helm 4 server-side-applies crds/ and
    # would conflict with their field manager, so the chart installs the CRDs only where they are missing.
    crd_present = rel.k("get", "crd", *CRD_NAMES, check=False).returncode == 0
    install = run_helm(
        helm, "install", rel.name, str(CHART), "--kubeconfig", kubeconfig, "--namespace", namespace,
        "-f", str(CHART / "ci" / "dev-values.yaml"),
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=IfNotPresent",
        "--set", f"watchNamespaces={{{sessions}}}", "--set", f"rbac.scope={rel.scope}",
        *(["--skip-crds"] if crd_present else []),
        "--wait", "--timeout", "180s",
        check=False, timeout=240,
    )  # fmt: skip
    try:
        if install.returncode != 0:
            pytest.fail(f"helm install failed:\n{install.stderr}\n{rel.diagnostics()}", pytrace=False)
        assert "AgentSession" in install.stdout  # NOTES.txt rendered
        yield rel
    finally:
        if not rel.uninstalled:
            rel.k("delete", "ags", "--all", "-n", sessions, "--wait=true", "--timeout=60s", check=False)
            rel.uninstall()


def test_session_reaches_ready_in_a_restricted_namespace(
    release: Release, wait_until: Callable[..., Any]
) -> None:
    ns = release.sessions
    release.k("apply", "-n", ns, "-f", str(REPO_ROOT / "examples" / "demo.yaml"))
    wait = release.k("wait", "-n", ns, "--for=condition=Ready", "agentsession/demo", f"--timeout={READY_TIMEOUT}",
                     check=False, timeout=300)  # fmt: skip
    if wait.returncode != 0:
        pytest.fail(
            f"session demo never became Ready:\n{wait.stderr}\n{release.diagnostics()}", pytrace=False
        )

    labels = json.loads(release.k("get", "namespace", ns, "-o", "json").stdout)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    session = json.loads(release.k("get", "ags", "demo", "-n", ns, "-o", "json").stdout)
    pod_name = session["status"]["podName"]

    def pod_phase() -> str:
        pod = json.loads(release.k("get", "pod", pod_name, "-n", ns, "-o", "json").stdout)
        return str(pod["status"]["phase"])

    # The kubelet may post the pod's phase a moment after the agent already answered the operator.
    wait_until(f"pod {pod_name} Running", lambda: pod_phase() == "Running", timeout=60)
    table = release.k("get", "ags", "-n", ns).stdout
    assert table.split()[:6] == ["NAME", "PHASE", "READY", "REASON", "AGENT", "AGE"], table
    assert table.splitlines()[1].split()[1:3] == ["Ready", "True"], table
    events = release.k(
        "get", "events", "-n", ns, "--field-selector", "involvedObject.kind=AgentSession"
    ).stdout
    # One Event per phase change: the last one says the agent is ready, and how long the start took.
    assert "Ready: the agent is ready for prompts" in events, events
    assert "Warning" not in events, events


async def test_kubectl_plugin_finds_the_gateway_through_its_service(
    release: Release, kube_api: Any, tmp_path: Path
) -> None:
    """No --gateway: the plugin picks the release's gateway Service by its label and the namespaces it serves,
    port-forwards to it, and reads the session's history with a token the gateway checks."""
    # For the gateway's audience, which the chart's gateway requires by default.
    token = service_account_token(kube_api, release.sessions, f"plugin-{release.scope}", ["get", "update"],
                                  audiences=["agentsession-gateway"])  # fmt: skip
    path = plugin_path(install_plugin(tmp_path / "bin").parent, release.kubectl)
    code, run = await run_plugin(release.kubectl, path, "history", "demo", "-n", release.sessions,
                                 "--kubeconfig", release.kubeconfig, "--token", token)  # fmt: skip
    assert code == 0, f"{run!r}\n{release.diagnostics()}"
    assert "you: Say hello and list the files in the workspace." in run.stdout, run


def test_operator_stays_healthy(release: Release) -> None:
    """The operator's /healthz (its liveness probe) answers 200 with the RBAC of this scope, read through the API
    server's pod proxy."""
    pods = json.loads(
        release.k(
            "get", "pods", "-n", release.namespace, "-l", "app.kubernetes.io/component=operator", "-o", "json"
        ).stdout
    )["items"]
    assert len(pods) == 1
    pod = pods[0]["metadata"]["name"]
    health = release.k(
        "get", "--raw", f"/api/v1/namespaces/{release.namespace}/pods/{pod}:8081/proxy/healthz", check=False
    )
    assert health.returncode == 0, f"/healthz failed: {health.stderr}\n{release.diagnostics()}"
    assert "watch" in json.loads(health.stdout)


def test_helm_test_hook_passes(release: Release) -> None:
    """The chart's own `helm test` hooks: pods reach the operator and the gateway through their Services."""
    test = run_helm(release.helm, "test", release.name, "--kubeconfig", release.kubeconfig, "--namespace",
                    release.namespace, "--logs", "--timeout", "120s", check=False, timeout=180)  # fmt: skip
    assert test.returncode == 0, f"helm test failed:\n{test.stderr}{test.stdout}\n{release.diagnostics()}"
    assert "ok  gateway /readyz" in test.stdout
    assert "ok  operator /healthz" in test.stdout


def test_uninstall_leaves_only_the_crd(release: Release, wait_until: Callable[..., Any]) -> None:
    # Sessions go before the operator that cleans up after them.
    release.k("delete", "ags", "--all", "-n", release.sessions, "--wait=true", "--timeout=120s", timeout=150)
    uninstall = release.uninstall()
    assert uninstall.returncode == 0, uninstall.stderr
    selector = f"app.kubernetes.io/instance={release.name}"

    # The release key is kept (resource-policy keep), so that sessions outliving a reinstall keep their tokens.
    key = f"secret/{release.name}-agentsession-agentctl-key"

    def leftovers() -> list[str]:
        kinds = (
            "all,cm,secret,sa,role,rolebinding,networkpolicy,pdb,clusterrole,clusterrolebinding,"
            "validatingadmissionpolicy,validatingadmissionpolicybinding"
        )
        return release.k("get", kinds, "-A", "-l", selector, "-o", "name").stdout.split()

    wait_until("no object of the release left after helm uninstall", lambda: leftovers() == [key], timeout=90)
    release.k("delete", key, "-n", release.namespace)
    # Session pods, token Secrets and PVCs are owned by their session: the garbage collector removes them.
    for ns in (release.namespace, release.sessions):
        wait_until(
            f"no pod left in {ns}",
            lambda ns=ns: release.k("get", "pods", "-n", ns, "-o", "name").stdout.strip() == "",
            timeout=120,
        )
    # The CRDs are Helm's `crds/`: never deleted by an uninstall (documented in docs/install.md).
    assert release.k("get", "crd", *CRD_NAMES, check=False).returncode == 0
