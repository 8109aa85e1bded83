"""Acceptance 3: Kubernetes tokens (TokenRequest API) checked with TokenReview, namespaces with SubjectAccessReview."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import websockets
from kubernetes import client

from tests.gateway.conftest import Client, service_account_token
from tests.support.kube import NOWHERE, Sessions

pytestmark = pytest.mark.cluster


@pytest.fixture
def other_namespace(kube_api: Any) -> Iterator[str]:
    core = client.CoreV1Api(kube_api)
    name = f"t-gw-other-{uuid.uuid4().hex[:6]}"
    core.create_namespace(
        {"metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "agentsession-tests"}}}
    )
    try:
        yield name
    finally:
        core.delete_namespace(name)


def of_type(kind: str) -> Any:
    return lambda f: f.get("type") == kind


async def refused(http: aiohttp.ClientSession, url: str, **kw: Any) -> int:
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await http.ws_connect(url, **kw)
    return caught.value.status


async def test_tokens_and_namespaces(
    sessions: Sessions,
    namespace: str,
    other_namespace: str,
    kube_api: Any,
    start_gateway: Any,
    connect: Any,
    http: aiohttp.ClientSession,
) -> None:
    theirs = Sessions(kube_api, other_namespace)
    sessions.create("mine", {"suspend": True, "podTemplate": {"nodeSelector": NOWHERE}})
    theirs.create("theirs", {"suspend": True, "podTemplate": {"nodeSelector": NOWHERE}})
    reader = service_account_token(kube_api, namespace, "reader", ["get", "list", "watch"])
    nobody = service_account_token(kube_api, namespace, "nobody", None)
    # A service account of namespace B with rights only in namespace B.
    outsider = service_account_token(
        kube_api, other_namespace, "outsider", ["get", "list", "watch", "update"]
    )
    gateway = start_gateway()  # every namespace
    url = gateway.ws_url

    assert await refused(http, url) == 401
    assert await refused(http, url, headers={"Authorization": "Bearer not-a-real-token"}) == 401
    assert await refused(http, url, protocols=("agent-lifecycle.v1", "bearer.forged")) == 401
    assert await refused(http, url, headers={"Authorization": f"Bearer {nobody}"}) == 403
    async with http.get(gateway.metrics_url) as resp:
        assert 'result="bad_token"' in await resp.text()

    ui: Client = await connect(url, token=reader)
    state = await ui.wait_for("session_state", of_type("session_state"))
    assert [a["id"] for a in state["payload"]["agents"]] == [f"{namespace}/mine"]

    # Namespace B's session is invisible: initialize says not found, the same as for one that does not exist.
    err = await ui.request(
        {"type": "initialize_agent_request", "agentId": f"{other_namespace}/theirs", "requestId": "b"},
        of_type("error"), "error for namespace B",
    )  # fmt: skip
    assert err["payload"]["code"] == "not_found"
    assert err["payload"]["requestId"] == "b"
    # Reading is not updating: starting a session needs the `update` verb.
    err = await ui.request(
        {"type": "initialize_agent_request", "agentId": f"{namespace}/mine", "requestId": "a"},
        of_type("error"), "forbidden initialize",
    )  # fmt: skip
    assert err["payload"]["code"] == "forbidden"
    assert sessions.get("mine")["spec"]["suspend"] is True

    # Changes in B never reach A's client: a new session in B first, then one in A, which must arrive alone.
    mark = len(ui.frames)
    theirs.create("later-b", {"suspend": True, "podTemplate": {"nodeSelector": NOWHERE}})
    sessions.create("later-a", {"suspend": True, "podTemplate": {"nodeSelector": NOWHERE}})
    await ui.wait_for(
        "status of later-a",
        lambda f: f.get("payload", {}).get("agentId") == f"{namespace}/later-a",
        since=mark,
    )
    assert all(other_namespace not in json.dumps(f) for f in ui.frames[mark:])

    # The browser way to pass a token: a `bearer.<token>` subprotocol entry (websockets client); never the URL.
    async with websockets.connect(url, subprotocols=["agent-lifecycle.v1", f"bearer.{outsider}"]) as ws:
        assert ws.subprotocol == "agent-lifecycle.v1"
        frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert frame["type"] == "session_state"
        assert sorted(a["id"] for a in frame["payload"]["agents"]) == [
            f"{other_namespace}/later-b",
            f"{other_namespace}/theirs",
        ]
    assert await refused(http, f"{url}?access_token={reader}") == 401
