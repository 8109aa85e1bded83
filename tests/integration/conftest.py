from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import wait_until


@pytest.fixture(scope="module")
def namespace_prefix() -> str:
    """Each module's operator watches only its own namespaces, so concurrent runs on one cluster never meet."""
    return f"op-{uuid.uuid4().hex[:6]}"


def fresh_namespace(kube_api: Any, prefix: str, pod_security: str = "restricted") -> Iterator[str]:
    """A new namespace whose Pod Security level is `pod_security`, ready for pods once its default service account
    exists; deleted afterwards."""
    core = client.CoreV1Api(kube_api)
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    labels = {
        "pod-security.kubernetes.io/enforce": pod_security,
        "app.kubernetes.io/part-of": "agentsession-tests",
    }
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    wait_until(f"service account in {name}", lambda: core.read_namespaced_service_account("default", name))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespace(kube_api: Any, namespace_prefix: str) -> Iterator[str]:
    yield from fresh_namespace(kube_api, namespace_prefix)


@pytest.fixture(scope="module")
def operator_namespaces(namespace_prefix: str) -> str:
    return f'["{namespace_prefix}-*"]'
