"""Acceptance 4: two replicas agree; agentctl dying and the API watch dropping recover without lost or
duplicated updates."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import wait_until
from tests.gateway.conftest import Client
from tests.gateway.tcp_proxy import CuttableProxy, kubeconfig_via
from tests.support.agentctl_signing import signed_for
from tests.support.gateway import of_type
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import OperatorProcess, agentctl_process

pytestmark = pytest.mark.cluster


def statuses(client: Client, agent_id: str, since: int = 0) -> list[str]:
    """The agent's status changes as this client saw them, repeats collapsed."""
    seen: list[str] = []
    for f in client.frames[since:]:
        mine = f.get("type") == "agent_status" and f["payload"]["agentId"] == agent_id
        if mine and (not seen or seen[-1] != f["payload"]["status"]):
            seen.append(f["payload"]["status"])
    return seen


def transcript(client: Client, init_index: int) -> list[dict[str, Any]]:
    """History from the client's agent_initialized and the agent_history pages after it, then every agent_update
    after it."""
    init = client.frames[init_index]
    assert init["type"] == "agent_initialized"
    request = init["payload"]["requestId"]
    later = client.frames[init_index + 1 :]
    pages = [
        f["payload"] for f in later if f["type"] == "agent_history" and f["payload"]["requestId"] == request
    ]
    assert [p["next"] for p in pages][-1:] == ([None] if pages else []), "the history did not end"
    live = [f["payload"] for f in later if f["type"] == "agent_update"]
    return list(init["payload"]["updates"]) + [u for p in pages for u in p["updates"]] + live


async def agentctl_history(http: aiohttp.ClientSession, port: int, token: str) -> list[dict[str, Any]]:
    base, path = f"http://127.0.0.1:{port}", "/api/v1/history"
    async with http.get(base + path, headers=await signed_for(http, base, token, "GET", path)) as r:
        entries = (await r.json())["updates"]
    return [e["notification"] for e in entries if e["kind"] == "session_update"]


async def prompt_and_wait(client: Client, agent_id: str, text: str) -> None:
    mark = len(client.frames)
    await client.send({"type": "send_agent_message", "agentId": agent_id, "text": text, "requestId": text})
    ack = await client.wait_for("ack", lambda f: f["type"] in ("ack", "error"), since=mark)
    assert ack["type"] == "ack", ack
    await client.wait_for(
        "processing", of_type("agent_status", agentId=agent_id, status="processing"), since=mark
    )
    await client.wait_for("ready", of_type("agent_status", agentId=agent_id, status="ready"), since=mark + 1)


async def test_replicas_agree_and_recover(
    operator: OperatorProcess,
    sessions: Sessions,
    namespace: str,
    kubeconfig: str,
    start_gateway: Any,
    connect: Any,
    agentctl_port: int,
    workdir: Path,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    name, agent_id = "twin", f"{namespace}/twin"
    sessions.create(name, {"podTemplate": {"nodeSelector": NOWHERE}})
    wait_until("pod", lambda: sessions.pod(name), timeout=30)
    token = sessions.token(name)

    # Replica 2 reaches the API server through a proxy the test can cut.
    proxy = CuttableProxy("", 0)
    proxy.start_in_thread()
    host, port, proxied = kubeconfig_via(kubeconfig, proxy.port, tmp_path / "proxied.kubeconfig")
    proxy.set_upstream(host, port)
    one = start_gateway("--namespace", namespace, "--insecure-dev-mode")
    two = start_gateway("--namespace", namespace, "--insecure-dev-mode", "--kubeconfig", proxied,
                        "--watch-inactivity-timeout", "5")  # fmt: skip

    agentctl_cm = agentctl_process(workdir, token, tmp_path / "agentctl-1.log", port=agentctl_port)
    agentctl = agentctl_cm.__enter__()
    try:
        await asyncio.to_thread(sessions.play_kubelet, name, agentctl_ready=True)
        await asyncio.to_thread(
            wait_until, "Ready", lambda: sessions.has_condition(name, "Ready", "True"), 60
        )
        a: Client = await connect(one.ws_url)
        b: Client = await connect(two.ws_url, protocols=("agent-lifecycle.v1",))
        for c in (a, b):
            await c.wait_for("session_state", of_type("session_state"))
            await c.send({"type": "initialize_agent_request", "agentId": agent_id})
            await c.wait_for("initialized", of_type("agent_initialized"), within=60)
        init_a = next(i for i, f in enumerate(a.frames) if f["type"] == "agent_initialized")
        init_b = next(i for i, f in enumerate(b.frames) if f["type"] == "agent_initialized")
        assert a.frames[init_a]["payload"]["info"] == b.frames[init_b]["payload"]["info"]

        mark_a, mark_b = len(a.frames), len(b.frames)
        await prompt_and_wait(a, agent_id, "first prompt")
        await b.wait_for(
            "replica 2 sees the turn end", of_type("agent_status", status="ready"), since=mark_b + 1
        )
        assert statuses(a, agent_id, mark_a) == statuses(b, agent_id, mark_b) == ["processing", "ready"]

        # agentctl dies; the kubelet would report the restart; a new agentctl serves the same workspace.
        agentctl.proc.send_signal(signal.SIGKILL)
        agentctl.proc.wait(timeout=10)
        await asyncio.to_thread(sessions.play_kubelet, name, agentctl_ready=False, restarts=1)
        for c in (a, b):
            await c.wait_for(
                "initializing while agentctl is down", of_type("agent_status", status="initializing")
            )
    finally:
        agentctl_cm.__exit__(None, None, None)

    with agentctl_process(workdir, token, tmp_path / "agentctl-2.log", port=agentctl_port):
        mark_a, mark_b = len(a.frames), len(b.frames)
        await asyncio.to_thread(sessions.play_kubelet, name, agentctl_ready=True, restarts=1)
        for c, mark in ((a, mark_a), (b, mark_b)):
            await c.wait_for("ready again", of_type("agent_status", status="ready"), within=60, since=mark)

        # The API watch of replica 2 drops; a change made meanwhile still reaches its clients.
        proxy.cut()
        await asyncio.to_thread(sessions.patch_spec, name, {"title": "renamed while cut"})
        await a.wait_for("title on replica 1", lambda f: f["type"] == "agent_status"
                         and f["payload"]["info"]["title"] == "renamed while cut")  # fmt: skip
        proxy.restore()
        await b.wait_for("title on replica 2 after the watch recovered", lambda f: f["type"] == "agent_status"
                         and f["payload"]["info"]["title"] == "renamed while cut", within=60)  # fmt: skip

        mark_a, mark_b = len(a.frames), len(b.frames)
        await prompt_and_wait(b, agent_id, "second prompt")
        await a.wait_for(
            "replica 1 sees the turn end", of_type("agent_status", status="ready"), since=mark_a + 1
        )
        assert statuses(a, agent_id, mark_a) == statuses(b, agent_id, mark_b) == ["processing", "ready"]

        # Nothing lost, nothing repeated: each client's history + live updates is exactly agentctl's journal.
        expected = await agentctl_history(http, agentctl_port, token)
        for c, init in ((a, init_a), (b, init_b)):
            got = [u["notification"] for u in transcript(c, init)]
            assert got == expected
        texts = [
            n["update"]["content"]["text"]
            for n in expected
            if n["update"]["sessionUpdate"] == "user_message_chunk"
        ]
        assert texts == ["first prompt", "second prompt"]

        # Both replicas answer the same list.
        lists = []
        for c in (a, b):
            reply = await c.request(
                {"type": "list_agents", "requestId": "l"}, of_type("session_state", requestId="l"), "list"
            )
            lists.append(reply["payload"]["agents"])
        assert lists[0] == lists[1]
        assert lists[0][0]["status"] == "ready"
    proxy.stop_thread()
