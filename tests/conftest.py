"""Shared fixtures for tests that need a real Kubernetes.

Which cluster: the one `KUBECONFIG` names when it answers, else the local cluster that `make cluster-up` starts
(hack/cluster). Without either, cluster tests skip with the reason; when `CI` is set or
`AGENTSESSION_REQUIRE_CLUSTER=1`, they fail instead, so a broken cluster can never pass as "all skipped".
Tests that need running pods also need a Ready node (`kubelet_ready`); set `AGENTSESSION_REQUIRE_KUBELET=1` to turn
that skip into a failure as well.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("AGENTSESSION_CACHE", Path.home() / ".cache" / "agentsession"))
CLUSTER_DIR = Path(os.environ.get("AGENTSESSION_CLUSTER_DIR", CACHE_DIR / "cluster"))
LOCAL_KUBECONFIG = CLUSTER_DIR / "admin.kubeconfig"
CONTAINERD_SOCK = CLUSTER_DIR / "run" / "containerd.sock"
CRD_FILE = REPO_ROOT / "crds" / "agentsessions.yaml"
POOL_CRD_FILE = REPO_ROOT / "crds" / "agentsessionpools.yaml"
CRD_FILES = (CRD_FILE, POOL_CRD_FILE)
DEFAULT_IMAGE = "agentsession:dev"

T = TypeVar("T")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "pod_security(level): Pod Security level the `namespace` fixture enforces (default: restricted)",
    )


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(
    reason: str, *, require_env: tuple[str, ...] = ("CI", "AGENTSESSION_REQUIRE_CLUSTER")
) -> None:
    """Skips, or fails where the environment says the cluster must be there."""
    if any(_truthy(v) for v in require_env):
        pytest.fail(f"{reason} (required here because one of {', '.join(require_env)} is set)", pytrace=False)
    pytest.skip(reason)


def require_tool(program: str) -> str:
    """The path of `program`; a skip without it, or a failure where CI or `AGENTSESSION_REQUIRE_TOOLS` says every
    tool of `hack/tools/install.sh` is installed."""
    found = shutil.which(program)
    if found is None:
        _unavailable(
            f"{program} is not installed (hack/tools/install.sh installs it)",
            require_env=("CI", "AGENTSESSION_REQUIRE_TOOLS"),
        )
    assert found is not None
    return found


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.25) -> T:
    """Polls `probe` until it returns something truthy; fails with `what` and the last error on timeout."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except Exception as exc:  # the condition may not hold yet in several ways; report the last one
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f"; last error: {last_error!r}" if last_error else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{detail}", pytrace=False)
        time.sleep(interval)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A workspace directory for an agentctl run outside a pod, with one file in it."""
    path = tmp_path / "workspace"
    path.mkdir()
    (path / "README.md").write_text("demo workspace\n")
    return path


@pytest.fixture(scope="module")
def agentctl_port() -> int:
    from tests.support.processes import free_port

    return free_port()


@pytest.fixture(scope="module")
def operator_namespaces() -> str:
    """What the `operator` fixture watches: the namespaces the `namespace` fixture makes."""
    return '["t-*"]'


@pytest.fixture(scope="module")
def operator(
    kubeconfig: str,
    crd_installed: list[str],
    agentctl_port: int,
    operator_namespaces: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    """The real operator entry point, reaching agentctl on loopback, where a test runs one in place of the pod's."""
    from tests.support.processes import operator_process

    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with operator_process(
        kubeconfig,
        log,
        namespaces=operator_namespaces,
        agentctl_host_override="127.0.0.1",
        agentctl_port=str(agentctl_port),
        start_retry_seconds="1",
    ) as running:
        yield running


@pytest.fixture(name="wait_until", scope="session")
def wait_until_fixture() -> Callable[..., Any]:
    """`wait_until(what, probe, timeout=60)`: the polling helper above, for tests in any folder."""
    return wait_until


def _readyz_error(kubeconfig: str) -> str | None:
    """None when the API server behind `kubeconfig` answers /readyz with ok, else why not."""
    from kubernetes import config

    try:
        api = config.new_client_from_config(config_file=kubeconfig)
    except Exception as exc:
        return f"cannot load kubeconfig {kubeconfig}: {exc}"
    try:
        resp = api.call_api(
            *api.param_serialize("GET", "/readyz", auth_settings=["BearerToken"]), _request_timeout=5
        )
        resp.read()
        body = resp.data.decode(errors="replace").strip()
        return None if body == "ok" else f"/readyz answered {body!r}"
    except Exception as exc:
        return f"API server of {kubeconfig} not reachable: {exc}"
    finally:
        api.close()


def installed_tool(name: str) -> str:
    """Path of a binary: the one hack/tools/install.sh installs, else the first on PATH, else unavailable."""
    cached = CACHE_DIR / "bin" / name
    path = str(cached) if os.access(cached, os.X_OK) else shutil.which(name)
    if not path:
        _unavailable(f"no {name}: run hack/tools/install.sh")
    assert path
    return path


@pytest.fixture(scope="session")
def kubectl() -> str:
    return installed_tool("kubectl")


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    """Path of the kubeconfig of a reachable cluster; exported as KUBECONFIG for the session's subprocesses."""
    reasons = []
    chosen = None
    env = os.environ.get("KUBECONFIG")
    if env:
        err = _readyz_error(env)
        if err is None:
            chosen = env
        else:
            reasons.append(f"KUBECONFIG={env}: {err}")
    if chosen is None:
        if LOCAL_KUBECONFIG.is_file():
            err = _readyz_error(str(LOCAL_KUBECONFIG))
            if err is None:
                chosen = str(LOCAL_KUBECONFIG)
            else:
                reasons.append(f"local cluster: {err}")
        else:
            reasons.append(f"local cluster: no {LOCAL_KUBECONFIG} (start it with `make cluster-up`)")
    if chosen is None:
        _unavailable("no Kubernetes API server: " + "; ".join(reasons))
    assert chosen
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", chosen)
        yield chosen


@pytest.fixture
def local_cluster(kubeconfig: str) -> Iterator[Path]:
    """The local cluster's directory, for tests that stop and start its daemons (`hack/cluster/component.sh`).

    Only when the tests' cluster is that one and its control plane runs here (pid files of etcd and
    kube-apiserver); elsewhere (kind, a remote cluster) they skip, or fail with AGENTSESSION_REQUIRE_CLUSTER=1.
    Afterwards the API server must be ready again, whatever the tests did to it.
    """
    pids = CLUSTER_DIR / "pids"
    if Path(kubeconfig) != LOCAL_KUBECONFIG:
        _unavailable(
            f"the tests' cluster ({kubeconfig}) is not the local one of hack/cluster, whose daemons they restart",
            require_env=("AGENTSESSION_REQUIRE_CLUSTER",),
        )
    missing = [name for name in ("etcd", "kube-apiserver") if not (pids / f"{name}.pid").is_file()]
    if missing:
        _unavailable(
            f"no pid file of {', '.join(missing)} in {pids}: the control plane was not started by hack/cluster/up.sh",
            require_env=("AGENTSESSION_REQUIRE_CLUSTER",),
        )
    yield CLUSTER_DIR
    error = _readyz_error(kubeconfig)
    assert error is None, f"the API server is not ready after the test: {error}; see {CLUSTER_DIR / 'logs'}"


@pytest.fixture(scope="session")
def kube_api(kubeconfig: str) -> Iterator[Any]:
    """A `kubernetes.client.ApiClient` for the session's cluster."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        yield api
    finally:
        api.close()


def _namespace_name(node_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-") or "test"
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(kube_api: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (Pod Security `restricted` enforced unless marked otherwise), deleted after the test.

    Yields once the namespace's default service account exists, since pods are refused before that.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    marker = request.node.get_closest_marker("pod_security")
    level = marker.args[0] if marker else "restricted"
    core = client.CoreV1Api(kube_api)
    name = _namespace_name(request.node.name)
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={
                    "app.kubernetes.io/part-of": "agentsession-tests",
                    "pod-security.kubernetes.io/enforce": level,
                    "pod-security.kubernetes.io/warn": level,
                },
            )
        )
    )
    try:
        wait_until(
            f"service account default in namespace {name}",
            lambda: core.read_namespaced_service_account("default", name),
            timeout=30,
        )
        yield name
    finally:
        try:
            core.delete_namespace(name, body=client.V1DeleteOptions(propagation_policy="Background"))
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture(scope="session")
def crd_installed(kube_api: Any, kubectl: str, kubeconfig: str) -> list[str]:
    """Applies the files of crds/ (server-side) and waits until every CRD in them is Established."""
    import yaml
    from kubernetes import client

    for path in CRD_FILES:
        if not path.is_file():
            pytest.skip(f"{path.relative_to(REPO_ROOT)} does not exist yet")
    names = [
        doc["metadata"]["name"]
        for path in CRD_FILES
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]
    files = [arg for path in CRD_FILES for arg in ("-f", str(path))]
    proc = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "--force-conflicts",
         "--field-manager", "agentsession-tests", *files],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"kubectl apply {' '.join(files)} failed:\n{proc.stderr or proc.stdout}", pytrace=False)
    ext = client.ApiextensionsV1Api(kube_api)

    def established(name: str) -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    for name in names:
        wait_until(f"CRD {name} Established", lambda n=name: established(n), timeout=60)  # type: ignore[misc]
    return names


def _ready_node(core: Any) -> str | None:
    for node in core.list_node().items:
        if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
            return str(node.metadata.name)
    return None


@pytest.fixture(scope="session")
def kubelet_ready(kube_api: Any) -> str:
    """Name of a Ready node; skips (fails with AGENTSESSION_REQUIRE_KUBELET=1) when the cluster runs no pods."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    deadline = time.monotonic() + 30
    while True:
        name = _ready_node(core)
        if name:
            return name
        if not core.list_node().items or time.monotonic() >= deadline:
            break
        time.sleep(0.5)  # a node registered but not yet Ready: the kubelet may still be starting
    _unavailable(
        "no Ready node in the cluster (tier 1 only, or the kubelet failed: see hack/cluster logs)",
        require_env=("AGENTSESSION_REQUIRE_KUBELET",),
    )
    raise AssertionError("unreachable")


def _image_names(ref: str) -> set[str]:
    """The forms a container runtime may list an image reference under."""
    names = {ref}
    first = ref.split("/", 1)[0]
    if "/" not in ref or ("." not in first and ":" not in first and first != "localhost"):
        path = ref if "/" in ref else f"library/{ref}"
        names.add(f"docker.io/{path}")
    return names


def _image_on_node(core: Any, names: set[str]) -> bool:
    for node in core.list_node().items:
        for image in node.status.images or []:
            if names & set(image.names or []):
                return True
    return False


def _image_in_local_containerd(names: set[str]) -> bool:
    if not CONTAINERD_SOCK.exists() or not shutil.which("ctr"):
        return False
    proc = subprocess.run(
        ["ctr", "--address", str(CONTAINERD_SOCK), "--namespace", "k8s.io", "images", "ls", "-q"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return proc.returncode == 0 and bool(names & set(proc.stdout.split()))


def image_present(kube_api: Any, kubeconfig: str, ref: str) -> bool:
    """Whether the node (or the local cluster's containerd) has the image `ref`, so pods need no pull."""
    from kubernetes import client

    names = _image_names(ref)
    local = Path(kubeconfig) == LOCAL_KUBECONFIG
    return (local and _image_in_local_containerd(names)) or _image_on_node(client.CoreV1Api(kube_api), names)


@pytest.fixture(scope="session")
def project_image(kube_api: Any, kubeconfig: str, kubelet_ready: str) -> str:
    """The project's image reference (env AGENTSESSION_IMAGE, default agentsession:dev), present on the node."""

    ref = os.environ.get("AGENTSESSION_IMAGE", DEFAULT_IMAGE)
    if image_present(kube_api, kubeconfig, ref):
        return ref
    _unavailable(
        f"image {ref} is not on the node: build and import it with `make image`",
        require_env=("AGENTSESSION_REQUIRE_KUBELET",),
    )
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def node_operator(
    kubeconfig: str, crd_installed: list[str], project_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The real operator, reaching each agentctl at its pod IP, with the project image on the node."""
    from tests.support.processes import operator_process

    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with operator_process(kubeconfig, log, image=project_image, image_pull_policy="IfNotPresent") as running:
        yield running


@pytest.fixture
def sessions(kube_api: Any, namespace: str) -> Any:
    """AgentSessions (and their pods, Secrets, Events) in the test's namespace."""
    from tests.support.kube import Sessions

    return Sessions(kube_api, namespace)
