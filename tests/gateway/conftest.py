"""Fixtures for the gateway against a real API server: the real operator and gateway entry points as
subprocesses, real agentctl processes (with the demo agent) on loopback standing in for the pod's sidecar,
and the test playing the kubelet for pods pinned to no node."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from tests.support.gateway import Client, GatewayProcess, gateway_process

__all__ = ["Client", "GatewayProcess", "gateway_process", "service_account_token"]


@pytest.fixture
def start_gateway(
    kubeconfig: str, crd_installed: list[str], tmp_path: Path
) -> Iterator[Callable[..., GatewayProcess]]:
    """Starts gateways (each a real `agentsession-gateway` process); stops them after the test."""
    started: list[Any] = []

    def _start(*args: str) -> GatewayProcess:
        cm = gateway_process(kubeconfig, tmp_path / f"gateway-{len(started)}.log", *args)
        running = cm.__enter__()
        started.append(cm)
        return running

    yield _start
    for cm in reversed(started):
        cm.__exit__(None, None, None)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


@pytest.fixture
async def connect(http: aiohttp.ClientSession) -> AsyncIterator[Callable[..., Awaitable[Client]]]:
    opened: list[Client] = []

    async def _connect(url: str, *, protocols: tuple[str, ...] = (), token: str | None = None) -> Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        ws = await http.ws_connect(url, protocols=protocols, headers=headers)
        c = Client(ws)
        opened.append(c)
        return c

    yield _connect
    for c in opened:
        await c.close()


def service_account_token(
    kube_api: Any,
    namespace: str,
    name: str,
    verbs: list[str] | None,
    *,
    role_namespace: str | None = None,
    audiences: list[str] | None = None,
) -> str:
    """A real token (TokenRequest API) for a new service account; `verbs` on agentsessions via a Role in
    `role_namespace` (default: the account's own), or no Role at all when None. The token is for `audiences`
    (default: the API server's own)."""
    core = client.CoreV1Api(kube_api)
    rbac = client.RbacAuthorizationV1Api(kube_api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    if verbs is not None:
        target = role_namespace or namespace
        rbac.create_namespaced_role(
            target,
            {
                "metadata": {"name": name},
                "rules": [
                    {"apiGroups": ["agentsession.dev"], "resources": ["agentsessions"], "verbs": verbs}
                ],
            },
        )
        rbac.create_namespaced_role_binding(
            target,
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        )
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if audiences:
        spec["audiences"] = audiences
    result = core.create_namespaced_service_account_token(name, namespace, {"spec": spec})
    return str(result.status.token)
