"""The `Kube` contract against the real API server: what the in-memory fake promises, the real client keeps."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentsession.kube.client import Kube, connect
from agentsession.kube.errors import Invalid
from tests.support import kube_contract

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("check", kube_contract.CHECKS, ids=lambda c: c.__name__)
async def test_contract(
    check: Callable[[Kube, str], Awaitable[None]], kubeconfig: str, crd_installed: list[str], namespace: str
) -> None:
    kube = await connect(kubeconfig)
    try:
        await check(kube, namespace)
    finally:
        await kube.close()


async def test_an_invalid_object_is_refused_as_invalid(kubeconfig: str, namespace: str) -> None:
    kube = await connect(kubeconfig)
    try:
        bad = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "Not_A_Name", "namespace": namespace},
        }
        with pytest.raises(Invalid) as refused:
            await kube.create(bad)
        assert refused.value.status == 422
        assert "Not_A_Name" in refused.value.api_message
    finally:
        await kube.close()
