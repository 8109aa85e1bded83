"""`helm install` on a real cluster: the operator and the gateway come up, a demo session reaches Ready in a
namespace that enforces the `restricted` Pod Security Standard, `helm test` passes, and `helm uninstall` leaves
nothing behind but the CRD.

The release serves only the test's namespace (`watchNamespaces`), so it never acts on other tests' sessions in
a shared cluster.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.chart.conftest import CHART, run_helm
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

READY_TIMEOUT = "240s"


def _split_image(ref: str) -> tuple[str, str]:
    repository, _, tag = ref.rpartition(":")
    if not repository or "/" in tag:
        return ref, "latest"
    return repository, tag


@pytest.fixture
def release_namespace(kube_api: Any) -> Iterator[str]:
    """The release's own namespace, restricted too: the chart's pods must be admitted there as well."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    name = f"chart-{uuid.uuid4().hex[:6]}"
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "app.kubernetes.io/part-of": "agentsession-tests",
    }
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    yield name
    core.delete_namespace(name)


def test_install_session_ready_uninstall(
    helm: str,
    kubectl: str,
    kubeconfig: str,
    project_image: str,
    namespace: str,
    release_namespace: str,
    kube_api: Any,
    wait_until: Callable[..., Any],
) -> None:
    from kubernetes import client

    def k(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}", pytrace=False)
        return proc

    def diagnostics() -> str:
        out = []
        for ns in (release_namespace, namespace):
            out.append(k("get", "pods,ags,events", "-n", ns, "-o", "wide", check=False).stdout)
            for deploy in ("operator", "gateway"):
                out.append(
                    k(
                        "logs", "-n", ns, f"deploy/{release}-agentsession-{deploy}", "--tail=40", check=False
                    ).stdout
                )
        return "\n".join(out)

    repository, tag = _split_image(project_image)
    release = f"it-{uuid.uuid4().hex[:6]}"
    install = run_helm(
        helm, "install", release, str(CHART), "--kubeconfig", kubeconfig, "--namespace", release_namespace,
        "-f", str(CHART / "ci" / "dev-values.yaml"),
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=IfNotPresent",
        "--set", f"watchNamespaces={{{namespace}}}",
        "--wait", "--timeout", "180s",
        check=False, timeout=240,
    )  # fmt: skip
    try:
        if install.returncode != 0:
            pytest.fail(f"helm install failed:\n{install.stderr}\n{diagnostics()}", pytrace=False)
        assert "AgentSession" in install.stdout  # NOTES.txt rendered

        k("apply", "-n", namespace, "-f", str(REPO_ROOT / "examples" / "demo.yaml"))
        wait = k("wait", "-n", namespace, "--for=condition=Ready", "agentsession/demo", f"--timeout={READY_TIMEOUT}",
                 check=False, timeout=300)  # fmt: skip
        if wait.returncode != 0:
            pytest.fail(f"session demo never became Ready:\n{wait.stderr}\n{diagnostics()}", pytrace=False)

        # Admitted under `restricted`: the pod exists and runs in a namespace that enforces it.
        ns = client.CoreV1Api(kube_api).read_namespace(namespace)
        assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
        session = json.loads(k("get", "ags", "demo", "-n", namespace, "-o", "json").stdout)
        pod_name = session["status"]["podName"]

        def pod_phase() -> str:
            return str(
                json.loads(k("get", "pod", pod_name, "-n", namespace, "-o", "json").stdout)["status"]["phase"]
            )

        # The kubelet may post the pod's phase a moment after the agent already answered the operator.
        wait_until(f"pod {pod_name} Running", lambda: pod_phase() == "Running", timeout=60)
        table = k("get", "ags", "-n", namespace).stdout
        assert table.split()[:6] == ["NAME", "PHASE", "READY", "REASON", "AGENT", "AGE"], table
        assert "Ready" in table.splitlines()[1]
        events = k(
            "get", "events", "-n", namespace, "--field-selector", "involvedObject.kind=AgentSession"
        ).stdout
        assert "demo" in events

        test = run_helm(helm, "test", release, "--kubeconfig", kubeconfig, "--namespace", release_namespace,
                        "--logs", "--timeout", "120s", check=False, timeout=180)  # fmt: skip
        assert test.returncode == 0, f"helm test failed:\n{test.stderr}{test.stdout}\n{diagnostics()}"

        # Sessions go before the operator that cleans up after them.
        k("delete", "ags", "demo", "-n", namespace, "--wait=true", "--timeout=120s", timeout=150)
    finally:
        uninstall = run_helm(helm, "uninstall", release, "--kubeconfig", kubeconfig, "--namespace",
                             release_namespace, "--wait", "--timeout", "120s", check=False, timeout=180)  # fmt: skip
    assert uninstall.returncode == 0, uninstall.stderr

    selector = f"app.kubernetes.io/instance={release}"

    def leftovers() -> str:
        kinds = "all,cm,secret,sa,role,rolebinding,networkpolicy,pdb,clusterrole,clusterrolebinding"
        return k("get", kinds, "-A", "-l", selector, "-o", "name").stdout.strip()

    wait_until("no object of the release left after helm uninstall", lambda: leftovers() == "", timeout=90)
    # The CRD is Helm's `crds/`: never deleted by an uninstall (documented in docs/install.md).
    assert k("get", "crd", "agentsessions.agentsession.dev", check=False).returncode == 0
