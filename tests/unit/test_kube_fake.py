"""The in-memory API server: the shared contract (also run against the real one), and what only tests use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentsession.kube.errors import Forbidden, Gone, KubeError
from agentsession.kube.resources import AGENT_SESSIONS, PODS
from agentsession.testing.fake_kube import FakeKube, merge_patch
from tests.support import kube_contract


@pytest.mark.parametrize("check", kube_contract.CHECKS, ids=lambda c: c.__name__)
async def test_contract(check: Callable[[FakeKube, str], Awaitable[None]]) -> None:
    await check(FakeKube(), "ns")


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "gone": 1}
    assert merge_patch(target, {"a": {"b": 9}, "l": [3], "gone": None}) == {"a": {"b": 9, "c": 2}, "l": [3]}


async def test_refusals_are_typed_and_counted() -> None:
    kube = FakeKube()
    kube.refuse("create", "Pod", 403, 'pods "p" is forbidden: exceeded quota', "Forbidden")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    with pytest.raises(Forbidden) as refused:
        await kube.create(pod)
    assert refused.value.api_message.endswith("exceeded quota")
    assert refused.value.kind == "Pod"
    await kube.create(pod)  # refused once only
    assert kube.verbs("Pod") == ["create Pod p", "create Pod p"]


async def test_finalizers_turn_a_delete_into_a_deletion_timestamp() -> None:
    kube = FakeKube()
    body = {
        "apiVersion": "x/v1",
        "kind": "AgentSession",
        "metadata": {"name": "a", "namespace": "ns", "finalizers": ["f"]},
    }
    await kube.create(body)
    await kube.delete(AGENT_SESSIONS, "ns", "a")
    assert (await kube.get(AGENT_SESSIONS, "ns", "a"))["metadata"]["deletionTimestamp"]


async def test_a_watch_from_a_compacted_version_is_gone() -> None:
    kube = FakeKube()
    await kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
    kube.compact()
    with pytest.raises(Gone) as gone:
        async for _ in kube.watch(PODS, "ns", resource_version="0", timeout_seconds=1, inactivity_timeout=1):
            pass
    assert str(gone.value).startswith("watch pods in ns failed: HTTP 410 Expired")


async def test_refused_calls_are_named_as_the_real_client_names_them() -> None:
    kube = FakeKube()
    kube.refuse("list", "Pod", 503, "etcd is not ready", "ServiceUnavailable")
    kube.refuse("patch-status", "AgentSession", 403, "denied", "Forbidden")
    with pytest.raises(KubeError) as listing:
        await kube.list(PODS, None)
    assert (
        str(listing.value)
        == "list pods in all namespaces failed: HTTP 503 ServiceUnavailable: etcd is not ready"
    )
    with pytest.raises(Forbidden) as patching:
        await kube.patch(AGENT_SESSIONS, "ns", "a", {"status": {}}, status=True)
    assert str(patching.value) == "patch status of AgentSession ns/a failed: HTTP 403 Forbidden: denied"
