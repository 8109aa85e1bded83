"""The in-memory API server: the shared contract (also run against the real one), and what only tests use."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentsession.kube.errors import Forbidden, Gone
from agentsession.kube.fake import FakeKube, merge_patch
from agentsession.kube.resources import AGENT_SESSIONS, PODS
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
    with pytest.raises(Gone):
        async for _ in kube.watch(PODS, "ns", resource_version="0", timeout_seconds=1, inactivity_timeout=1):
            pass
