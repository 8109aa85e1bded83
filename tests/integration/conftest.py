from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import wait_until
from tests.support.kube import Sessions
from tests.support.processes import OperatorProcess, free_port, operator_process


@pytest.fixture(scope="module")
def agentctl_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def namespace_prefix() -> str:
    """Each module's operator watches only its own namespaces, so concurrent runs on one cluster never meet."""
    return f"op-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(kube_api: Any, namespace_prefix: str) -> Iterator[str]:
    core = client.CoreV1Api(kube_api)
    name = f"{namespace_prefix}-{uuid.uuid4().hex[:6]}"
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "app.kubernetes.io/part-of": "agentsession-tests",
    }
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    wait_until(f"service account in {name}", lambda: core.read_namespaced_service_account("default", name))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def operator(
    kubeconfig: str,
    crd_installed: list[str],
    agentctl_port: int,
    namespace_prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The real operator entry point; it reaches agentctl on loopback, where each test runs one."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with operator_process(
        kubeconfig,
        log,
        namespaces=f'["{namespace_prefix}-*"]',
        agentctl_host_override="127.0.0.1",
        agentctl_port=str(agentctl_port),
        start_retry_seconds="1",
    ) as running:
        yield running


@pytest.fixture
def sessions(kube_api: Any, namespace: str) -> Sessions:
    return Sessions(kube_api, namespace)
