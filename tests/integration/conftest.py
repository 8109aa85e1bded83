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
def operator_namespaces(namespace_prefix: str) -> str:
    return f'["{namespace_prefix}-*"]'
