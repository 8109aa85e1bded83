"""Proves the cluster the other tests run against: API server, controllers, and (tier 2) a kubelet running pods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.cluster

POD_TIMEOUT = 120


def _raw_get(kube_api: Any, path: str) -> tuple[int, str]:
    resp = kube_api.call_api(
        *kube_api.param_serialize("GET", path, auth_settings=["BearerToken"]), _request_timeout=10
    )
    resp.read()
    return resp.status, resp.data.decode(errors="replace")


def _gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_readyz(kube_api: Any) -> None:
    status, body = _raw_get(kube_api, "/readyz")
    assert (status, body.strip()) == (200, "ok")
    status, body = _raw_get(kube_api, "/readyz?verbose")
    assert "[+]etcd ok" in body


def test_service_account_tokens_are_issued(kube_api: Any, namespace: str, wait_until: Any) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="probe"))
    )
    token = core.create_namespaced_service_account_token(
        "probe",
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
        ),
    ).status.token
    review = client.AuthenticationV1Api(kube_api).create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
    )
    assert review.status.authenticated, review.status.error
    assert review.status.user.username == f"system:serviceaccount:{namespace}:probe"
    # The root-CA publisher (controller-manager) gives every namespace the CA bundle that pods mount.
    cm = wait_until(
        "kube-root-ca.crt in the namespace",
        lambda: core.read_namespaced_config_map("kube-root-ca.crt", namespace),
        timeout=30,
    )
    assert "BEGIN CERTIFICATE" in cm.data["ca.crt"]


def test_garbage_collector_deletes_dependents(kube_api: Any, namespace: str, wait_until: Any) -> None:
    core = client.CoreV1Api(kube_api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"), data={"k": "v"})
    )
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="dependent",
                owner_references=[
                    client.V1OwnerReference(
                        api_version="v1",
                        kind="ConfigMap",
                        name="owner",
                        uid=owner.metadata.uid,
                        block_owner_deletion=True,
                    )
                ],
            ),
            string_data={"token": "x"},
        ),
    )
    core.delete_namespaced_config_map(
        "owner", namespace, body=client.V1DeleteOptions(propagation_policy="Background")
    )
    wait_until(
        "the garbage collector to delete the owned Secret",
        lambda: _gone(lambda: core.read_namespaced_secret("dependent", namespace)),
        timeout=60,
    )


def test_namespace_deletion_removes_its_objects(kube_api: Any, wait_until: Any) -> None:
    core = client.CoreV1Api(kube_api)
    ns = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(generate_name="t-nsdel-")))
    name = ns.metadata.name
    core.create_namespaced_config_map(name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    core.delete_namespace(name)
    wait_until(
        "the namespace controller to finish deleting", lambda: _gone(lambda: core.read_namespace(name))
    )


# ---------------------------------------------------------------------------------------------- tier 2: pods


def _restricted() -> client.V1SecurityContext:
    return client.V1SecurityContext(
        allow_privilege_escalation=False,
        run_as_non_root=True,
        capabilities=client.V1Capabilities(drop=["ALL"]),
        read_only_root_filesystem=True,
    )


def _container(name: str, image: str, command: list[str], **kwargs: Any) -> client.V1Container:
    return client.V1Container(
        name=name,
        image=image,
        image_pull_policy="IfNotPresent",
        command=command,
        security_context=_restricted(),
        resources=client.V1ResourceRequirements(
            requests={"cpu": "10m", "memory": "32Mi"}, limits={"cpu": "500m", "memory": "256Mi"}
        ),
        **kwargs,
    )


def _pod(
    name: str,
    containers: list[client.V1Container],
    init_containers: list[client.V1Container] | None = None,
    restart_policy: str = "Never",
) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            containers=containers,
            init_containers=init_containers,
            restart_policy=restart_policy,
            termination_grace_period_seconds=1,
            security_context=client.V1PodSecurityContext(
                run_as_user=65532,
                run_as_group=65532,
                seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
            ),
        ),
    )


def _wait_phase(core: Any, namespace: str, name: str, phase: str, wait_until: Any) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.status.phase == "Failed" and phase != "Failed":
            logs = {
                c.name: core.read_namespaced_pod_log(name, namespace, container=c.name)
                for c in pod.spec.containers
            }
            pytest.fail(f"pod {name} failed: {pod.status}\nlogs: {logs}")
        return pod if pod.status.phase == phase else None

    return wait_until(f"pod {namespace}/{name} phase {phase}", probe, timeout=POD_TIMEOUT)


def _sidecar_status(pod: client.V1Pod) -> Any:
    statuses = pod.status.init_container_statuses or []
    return next((s for s in statuses if s.name == "sidecar"), None)


def _pod_condition(pod: client.V1Pod, type_: str) -> str | None:
    return next((c.status for c in pod.status.conditions or [] if c.type == type_), None)


@pytest.mark.kubelet
def test_pod_of_project_image_runs(
    kube_api: Any, namespace: str, project_image: str, wait_until: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    script = (
        "import shutil, agentsession\n"
        "scripts = ['agentsession-operator', 'agentsession-gateway', 'agentctl', 'agentsession-demo-agent']\n"
        "missing = [s for s in scripts if not shutil.which(s)]\n"
        "assert not missing, missing\n"
        "print('entry points ok')\n"
    )
    core.create_namespaced_pod(
        namespace, _pod("smoke", [_container("main", project_image, ["python3", "-c", script])])
    )
    _wait_phase(core, namespace, "smoke", "Succeeded", wait_until)
    # Reading the log goes API server -> kubelet, so this also proves that path.
    assert core.read_namespaced_pod_log("smoke", namespace, container="main").strip() == "entry points ok"


@pytest.mark.kubelet
def test_pod_reaches_api_server_through_kubernetes_service(
    kube_api: Any, namespace: str, project_image: str, wait_until: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    script = (
        "import os, ssl, urllib.request\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "host, port = os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']\n"
        "ctx = ssl.create_default_context(cafile=f'{sa}/ca.crt')\n"
        "req = urllib.request.Request(f'https://{host}:{port}/readyz',\n"
        "    headers={'Authorization': 'Bearer ' + open(f'{sa}/token').read()})\n"
        "print(urllib.request.urlopen(req, context=ctx, timeout=10).read().decode())\n"
    )
    core.create_namespaced_pod(
        namespace, _pod("api-client", [_container("main", project_image, ["python3", "-c", script])])
    )
    _wait_phase(core, namespace, "api-client", "Succeeded", wait_until)
    assert core.read_namespaced_pod_log("api-client", namespace, container="main").strip() == "ok"


def _sidecar_pod(name: str, image: str, probe_port: int) -> client.V1Pod:
    sidecar = _container(
        "sidecar",
        image,
        ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0", "--directory", "/"],
        restart_policy="Always",
        ports=[client.V1ContainerPort(container_port=8080, name="http")],
        readiness_probe=client.V1Probe(
            http_get=client.V1HTTPGetAction(path="/", port=probe_port),
            period_seconds=1,
            failure_threshold=1,
            timeout_seconds=2,
        ),
    )
    main = _container("main", image, ["python3", "-c", "import time; time.sleep(3600)"])
    return _pod(name, [main], init_containers=[sidecar], restart_policy="Always")


@pytest.mark.kubelet
def test_native_sidecar_readiness_probe_flips_ready(
    kube_api: Any, namespace: str, project_image: str, wait_until: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, _sidecar_pod("sidecar-ok", project_image, probe_port=8080))

    def ready_sidecar() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("sidecar-ok", namespace)
        status = _sidecar_status(pod)
        return pod if status is not None and status.ready else None

    pod = wait_until("the sidecar's readiness probe to pass", ready_sidecar, timeout=POD_TIMEOUT)
    assert _sidecar_status(pod).state.running is not None
    # Sidecar readiness lives in initContainerStatuses; the main container is reported separately.
    assert [s.name for s in pod.status.container_statuses] == ["main"]
    wait_until(
        "pod condition Ready=True",
        lambda: _pod_condition(core.read_namespaced_pod("sidecar-ok", namespace), "Ready") == "True",
        timeout=POD_TIMEOUT,
    )


@pytest.mark.kubelet
def test_failing_readiness_probe_reports_not_ready(
    kube_api: Any, namespace: str, project_image: str, wait_until: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    # The server listens on 8080; the probe asks 8081, where nothing answers.
    core.create_namespaced_pod(namespace, _sidecar_pod("sidecar-bad", project_image, probe_port=8081))

    def probe_failed() -> Any:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=sidecar-bad").items
        return next(
            (e for e in events if e.reason == "Unhealthy" and "Readiness probe failed" in (e.message or "")),
            None,
        )

    event = wait_until(
        "an Unhealthy event from the kubelet's readiness probe", probe_failed, timeout=POD_TIMEOUT
    )
    # The operator selects agentctl's probe failures by this path, apart from the agent container's.
    assert event.involved_object.field_path == "spec.initContainers{sidecar}"
    pod = core.read_namespaced_pod("sidecar-bad", namespace)
    status = _sidecar_status(pod)
    assert status is not None
    assert status.started
    assert status.state.running is not None
    assert status.ready is False
    assert _pod_condition(pod, "Ready") == "False"


@pytest.mark.kubelet
def test_default_storage_class_provisions_writable_volumes(
    kube_api: Any, namespace: str, project_image: str, wait_until: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="data"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )
    script = "p = '/data/probe'\nopen(p, 'w').write('written')\nprint(open(p).read())\n"
    pod = _pod("writer", [_container("main", project_image, ["python3", "-c", script])])
    pod.spec.containers[0].volume_mounts = [client.V1VolumeMount(name="data", mount_path="/data")]
    pod.spec.volumes = [
        client.V1Volume(
            name="data",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name="data"),
        )
    ]
    core.create_namespaced_pod(namespace, pod)
    _wait_phase(core, namespace, "writer", "Succeeded", wait_until)
    assert core.read_namespaced_pod_log("writer", namespace, container="main").strip() == "written"

    volume = core.read_namespaced_persistent_volume_claim("data", namespace).spec.volume_name
    assert volume
    core.delete_namespaced_pod("writer", namespace, grace_period_seconds=0)
    core.delete_namespaced_persistent_volume_claim("data", namespace)
    wait_until(
        f"the released volume {volume} to be deleted",
        lambda: _gone(lambda: core.read_persistent_volume(volume)),
        timeout=60,
    )
