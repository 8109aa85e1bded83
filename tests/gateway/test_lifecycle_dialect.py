"""Acceptance 1: the lifecycle dialect end to end against a real API server, operator and agentctl."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import wait_until
from tests.gateway.conftest import Client, service_account_token
from tests.support.agentctl_signing import signed_for
from tests.support.gateway import initialize, of_type
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import OperatorProcess, agentctl_process

pytestmark = pytest.mark.cluster

AGENT_INFO_KEYS = ["id", "status", "createdAt", "type", "sessionId", "error", "currentModeId",
                   "availableModes", "title", "cwd"]  # fmt: skip


async def play_kubelet_when_pod_exists(sessions: Sessions, name: str) -> None:
    await asyncio.to_thread(wait_until, "the session's pod", lambda: sessions.pod(name), 60)
    await asyncio.to_thread(sessions.play_kubelet, name, agentctl_ready=True)


def texts(updates: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for u in updates:
        update = u["notification"]["update"]
        content = update.get("content")
        text = content.get("text", "") if isinstance(content, dict) else ""
        out.append((update["sessionUpdate"], text))
    return out


async def test_connect_initialize_prompt_and_permissions(
    operator: OperatorProcess,
    sessions: Sessions,
    namespace: str,
    kube_api: Any,
    start_gateway: Any,
    connect: Any,
    agentctl_port: int,
    workdir: Path,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    sessions.create(
        "life",
        {"suspend": True, "title": "Lifecycle", "prompt": "hello there",
         "podTemplate": {"nodeSelector": NOWHERE}},
    )  # fmt: skip
    wait_until("phase Suspended", lambda: sessions.get("life").get("status", {}).get("phase") == "Suspended")
    token = service_account_token(kube_api, namespace, "ui", ["get", "list", "watch", "update", "patch"])
    gateway = start_gateway("--namespace", namespace)
    agent_id = f"{namespace}/life"

    ui: Client = await connect(gateway.ws_url, token=token)
    state = await ui.wait_for("session_state", of_type("session_state"))
    (info,) = state["payload"]["agents"]
    assert list(info) == AGENT_INFO_KEYS
    assert (info["id"], info["status"], info["title"], info["type"]) == (
        agent_id,
        "uninitialized",
        "Lifecycle",
        "demo",
    )

    # Client-driven lazy initialization: the suspended session is started and the reply waits for readiness.
    kubelet = asyncio.create_task(play_kubelet_when_pod_exists(sessions, "life"))
    secret_token = await asyncio.to_thread(wait_until, "agentctl token", lambda: sessions.token("life"))
    with agentctl_process(workdir, secret_token, tmp_path / "agentctl.log", port=agentctl_port):
        payload = await initialize(ui, agent_id, "r1", within=90)
        await kubelet
        assert sessions.get("life")["spec"]["suspend"] is False
        assert payload["requestId"] == "r1"
        assert payload["agentId"] == agent_id
        assert list(payload["info"]) == AGENT_INFO_KEYS
        assert payload["info"]["status"] in ("ready", "processing")
        assert payload["info"]["sessionId"]
        assert ("user_message_chunk", "hello there") in texts(payload["updates"])
        assert all(set(u) == {"agentId", "timestamp", "notification"} for u in payload["updates"])
        mark = len(ui.frames)

        # The initial prompt's turn may still be running: wait until it has ended, seen through agentctl.
        async def idle() -> bool:
            base, path = f"http://127.0.0.1:{agentctl_port}", "/api/v1/status"
            headers = await signed_for(http, base, secret_token, "GET", path)
            async with http.get(base + path, headers=headers) as resp:
                return not (await resp.json())["acp"]["turn_running"]

        deadline = time.monotonic() + 30
        while not await idle():
            assert time.monotonic() < deadline, "initial prompt never finished"
            await asyncio.sleep(0.1)
        await ui.wait_for("status ready", of_type("agent_status", agentId=agent_id, status="ready"), since=0)

        # Idempotent: a second request starts nothing and answers with the same history (plus what streamed live
        # since).
        before_second = len(ui.frames)
        second = await initialize(ui, agent_id, "r2")
        restarted = [
            f for f in ui.frames[before_second:] if of_type("agent_status", status="initializing")(f)
        ]
        assert restarted == [], restarted
        assert sessions.get("life")["status"]["acp"]["sessionId"] == payload["info"]["sessionId"]
        live = [f["payload"] for f in ui.frames[mark:] if f["type"] == "agent_update"]
        assert second["updates"] == payload["updates"] + live

        # A prompt: processing, the streamed updates, then ready again.
        mark = len(ui.frames)
        ack = await ui.request(
            {"type": "send_agent_message", "agentId": agent_id, "text": "say something", "requestId": "p1"},
            lambda f: f["type"] in ("ack", "error") and f["payload"].get("requestId") == "p1", "prompt ack",
        )  # fmt: skip
        assert ack["type"] == "ack", ack
        await ui.wait_for(
            "processing", of_type("agent_status", agentId=agent_id, status="processing"), since=mark
        )
        await ui.wait_for("ready after the turn", of_type("agent_status", status="ready"), since=mark)
        turn = [f for f in ui.frames[mark:] if f["type"] in ("agent_update", "agent_status")]
        kinds = [f["type"] if f["type"] == "agent_status" else "update" for f in turn]
        first_processing = next(
            i
            for i, f in enumerate(turn)
            if f["type"] == "agent_status" and f["payload"]["status"] == "processing"
        )
        assert "update" in kinds[first_processing:]
        streamed = texts([f["payload"] for f in turn if f["type"] == "agent_update"])
        assert ("user_message_chunk", "say something") in streamed
        assert any(kind == "agent_message_chunk" for kind, _ in streamed)

        # Permissions round-trip: request → response → resolved, and the turn completes.
        mark = len(ui.frames)
        await ui.send({"type": "send_agent_message", "agentId": agent_id, "text": "write with permission"})
        asked = await ui.wait_for("permission request", of_type("agent_permission_request"), since=mark)
        request = asked["payload"]
        assert request["agentId"] == agent_id
        assert request["options"]
        option = request["options"][0]["optionId"]
        await ui.send({"type": "agent_permission_response", "agentId": agent_id,
                       "permissionId": request["permissionId"], "optionId": option, "requestId": "perm"})  # fmt: skip
        resolved = await ui.wait_for("permission resolved", of_type("agent_permission_resolved"), since=mark)
        assert resolved["payload"]["permissionId"] == request["permissionId"]
        assert resolved["payload"]["outcome"] == {"outcome": "selected", "optionId": option}
        await ui.wait_for("turn end", of_type("agent_status", status="ready"), since=mark + 1)

        # Malformed input gets typed errors and the connection keeps serving.
        for bad, code in [
            ("{not json", "invalid_json"),
            ({"type": "no_such_thing"}, "unknown_action"),
            ({"type": "initialize_agent_request"}, "validation_error"),
            ({"type": "send_agent_message", "agentId": agent_id, "text": 5}, "validation_error"),
            ({"type": "initialize_agent_request", "agentId": "nope", "requestId": "x"}, "validation_error"),
            (
                {"type": "initialize_agent_request", "agentId": f"{namespace}/missing", "requestId": "y"},
                "not_found",
            ),
        ]:
            err = await ui.request(bad, of_type("error"), f"error {code}")  # type: ignore[arg-type]
            assert err["payload"]["code"] == code, err
        pong = await ui.request({"type": "ping", "requestId": "alive"}, of_type("pong"), "pong")
        assert pong["payload"]["requestId"] == "alive"
