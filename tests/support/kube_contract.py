"""Behaviour every `Kube` must show, checked against the in-memory fake (unit tier) and the real API server
(cluster tier), so the fake the reconciler's unit tests run on cannot drift from what it stands in for."""

from __future__ import annotations

import asyncio
import base64
import uuid

import pytest

from agentsession.api.constants import API_VERSION, KIND
from agentsession.kube.client import Kube, WatchEvent
from agentsession.kube.errors import Conflict, NotFound
from agentsession.kube.ops import create_or_read
from agentsession.kube.resources import AGENT_SESSIONS, EVENTS, LEASES, SECRETS


def _secret(namespace: str, name: str) -> dict[str, object]:
    data = {"token": base64.b64encode(b"t").decode()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def _session(namespace: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"agent": {"type": "demo"}, "suspend": True},
    }


async def created_objects_have_identity_and_conflict(kube: Kube, namespace: str) -> None:
    name = f"s-{uuid.uuid4().hex[:6]}"
    created = await kube.create(_secret(namespace, name))
    assert created["metadata"]["uid"]
    assert created["metadata"]["resourceVersion"]
    with pytest.raises(Conflict) as refused:
        await kube.create(_secret(namespace, name))
    assert refused.value.already_exists
    assert refused.value.status == 409
    again, made = await create_or_read(kube, _secret(namespace, name))
    assert (again["metadata"]["uid"], made) == (created["metadata"]["uid"], False)
    with pytest.raises(NotFound) as missing:
        await kube.get(SECRETS, namespace, f"{name}-missing")
    # The message names the call the same way from either: a condition or a log line built from it reads alike.
    assert str(missing.value).startswith(f"get Secret {namespace}/{name}-missing failed: HTTP 404 NotFound: ")


async def spec_and_status_patches(kube: Kube, namespace: str) -> None:
    name = f"a-{uuid.uuid4().hex[:6]}"
    created = await kube.create(_session(namespace, name))
    generation = created["metadata"]["generation"]
    with_status = await kube.patch(
        AGENT_SESSIONS, namespace, name, {"status": {"phase": "Suspended"}}, status=True
    )
    assert with_status["status"]["phase"] == "Suspended"
    assert with_status["metadata"]["generation"] == generation, "a status write is no spec change"
    assert int(with_status["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    resumed = await kube.patch(
        AGENT_SESSIONS, namespace, name, {"spec": {"suspend": False}, "status": {"phase": "X"}}
    )
    assert resumed["spec"]["suspend"] is False
    assert resumed["metadata"]["generation"] == generation + 1
    assert resumed["status"]["phase"] == "Suspended", "the main resource ignores status"


async def delete_honours_the_uid_precondition(kube: Kube, namespace: str) -> None:
    name = f"s-{uuid.uuid4().hex[:6]}"
    created = await kube.create(_secret(namespace, name))
    with pytest.raises(Conflict):
        await kube.delete(SECRETS, namespace, name, uid=str(uuid.uuid4()))
    await kube.delete(SECRETS, namespace, name, uid=created["metadata"]["uid"])
    with pytest.raises(NotFound):
        await kube.get(SECRETS, namespace, name)
    with pytest.raises(NotFound):
        await kube.delete(SECRETS, namespace, name)


async def field_selectors_pick_events(kube: Kube, namespace: str) -> None:
    involved = {
        "apiVersion": "v1",
        "kind": "Secret",
        "name": "x",
        "namespace": namespace,
        "uid": str(uuid.uuid4()),
    }
    for reason in ("Unhealthy", "Other"):
        await kube.create({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"x.{uuid.uuid4().hex[:8]}", "namespace": namespace},
            "involvedObject": involved, "reason": reason, "type": "Warning", "message": reason,
        })  # fmt: skip
    selector = f"involvedObject.uid={involved['uid']},reason=Unhealthy,type=Warning"
    found = (await kube.list(EVENTS, namespace, field_selector=selector)).items
    assert [e["reason"] for e in found] == ["Unhealthy"]


async def watches_resume_from_a_list(kube: Kube, namespace: str) -> None:
    listing = await kube.list(AGENT_SESSIONS, namespace)
    name = f"w-{uuid.uuid4().hex[:6]}"
    seen: list[WatchEvent] = []

    async def follow() -> None:
        events = kube.watch(
            AGENT_SESSIONS, namespace, resource_version=listing.resource_version, timeout_seconds=30,
            inactivity_timeout=30,
        )  # fmt: skip
        async for event in events:
            if event.type != "BOOKMARK" and event.object["metadata"]["name"] == name:
                seen.append(event)
                if event.type == "DELETED":
                    return

    watcher = asyncio.create_task(follow())
    await kube.create(_session(namespace, name))
    await kube.patch(AGENT_SESSIONS, namespace, name, {"spec": {"title": "t"}})
    await kube.delete(AGENT_SESSIONS, namespace, name)
    async with asyncio.timeout(20):
        await watcher
    assert [e.type for e in seen] == ["ADDED", "MODIFIED", "DELETED"]
    assert seen[1].object["spec"]["title"] == "t"


async def lease_patches_carry_their_resource_version(kube: Kube, namespace: str) -> None:
    """Leader election's optimistic concurrency: a patch naming an old resourceVersion is a Conflict."""
    name = f"l-{uuid.uuid4().hex[:6]}"
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"}
    lease = {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    created = await kube.create(lease)
    version = created["metadata"]["resourceVersion"]
    renewed = await kube.patch(
        LEASES, namespace, name, {"metadata": {"resourceVersion": version}, "spec": {"leaseTransitions": 1}}
    )
    assert renewed["spec"]["holderIdentity"] == "a"
    with pytest.raises(Conflict) as stale:
        await kube.patch(
            LEASES,
            namespace,
            name,
            {"metadata": {"resourceVersion": version}, "spec": {"holderIdentity": "b"}},
        )
    assert not stale.value.already_exists
    freed = await kube.patch(
        LEASES,
        namespace,
        name,
        {
            "metadata": {"resourceVersion": renewed["metadata"]["resourceVersion"]},
            "spec": {"holderIdentity": None},
        },
    )
    assert "holderIdentity" not in freed["spec"]
    assert (await kube.get(LEASES, namespace, name))["spec"]["leaseTransitions"] == 1


CHECKS = [
    created_objects_have_identity_and_conflict,
    spec_and_status_patches,
    delete_honours_the_uid_precondition,
    field_selectors_pick_events,
    watches_resume_from_a_list,
    lease_patches_carry_their_resource_version,
]
