"""Acceptance 5: hostile clients and a hostile agent get specific 4xx answers or clear errors; agentctl keeps serving."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import aiohttp
import pytest
import websockets

from agentsession.contract.auth import authorization
from agentsession.demo_agent.agent import ODD_UPDATES
from tests.component.conftest import TOKEN, Agentctl, frames_until, update_kind, wait_until

AUTH_CASES = [
    ({}, "missing"),
    ({"Authorization": f"Bearer {TOKEN}"}, "AgentctlSignature scheme"),
    ({"Authorization": "Basic dXNlcjpwYXNz"}, "AgentctlSignature scheme"),
    ({"Authorization": "AgentctlSignature v1"}, "each once"),
    ({"Authorization": "AgentctlSignature v2 i=1"}, "version"),
    (
        {"Authorization": authorization("wrong-token", "0", "GET", "/api/v1/status")},
        "another agentctl instance",
    ),
]


async def test_auth_is_required(agentctl: Agentctl, http: aiohttp.ClientSession) -> None:
    for headers, needle in AUTH_CASES:
        for method, path in [("GET", "/api/v1/status"), ("POST", "/api/v1/start")]:
            async with http.request(method, agentctl.base + path, headers=headers) as resp:
                assert resp.status == 401, (path, headers)
                body = await resp.json()
            assert body["success"] is False
            assert body["error"] == "unauthorized"
            assert needle in body["message"], (headers, body)
        with pytest.raises(websockets.InvalidStatus) as info:
            await websockets.connect(
                f"ws://127.0.0.1:{agentctl.port}/api/v1/acp/stream", additional_headers=headers
            )
        assert info.value.response.status_code == 401
    for path in ("/health", "/metrics"):  # the probes and the counters need no signature
        async with http.get(agentctl.base + path) as resp:
            assert resp.status == 200, path
    assert (await agentctl.status())["state"] == "stopped"  # none of the rejected calls reached the agent


async def test_bad_requests_get_specific_4xx(agentctl: Agentctl) -> None:
    cases = [
        ("POST", "/api/v1/start", "{not json", 400, "not valid JSON"),
        ("POST", "/api/v1/start", "[1, 2]", 422, "JSON object"),
        ("POST", "/api/v1/start", '{"prompt": 42}', 422, "prompt"),
        ("POST", "/api/v1/start", '{"session": "x"}', 422, "session"),
        ("POST", "/api/v1/acp/prompt", "{}", 422, "prompt"),
        ("POST", "/api/v1/acp/prompt", '{"prompt": "hi"}', 409, "/api/v1/start"),
        ("POST", "/api/v1/acp/mode", '{"mode_id": ""}', 422, "mode_id"),
        ("POST", "/api/v1/acp/permissions/respond", '{"pending_id": "x"}', 422, "exactly one"),
        ("POST", "/api/v1/acp/session/load", '{"session_id": "x", "cwd": "relative"}', 409, "start"),
        ("POST", "/api/v1/acp/frobnicate", "{}", 404, "no route POST /api/v1/acp/frobnicate"),
        ("DELETE", "/api/v1/start", "", 405, "not allowed"),
        ("GET", "/api/v1/history?after=abc", "", 400, "'after' must be an integer"),
        ("GET", "/api/v1/acp/stream", "", 426, "WebSocket"),
        ("POST", "/api/v1/start", b"\xff\xfe\x00", 400, "UTF-8"),
    ]
    for method, path, body, code, needle in cases:
        status, data = await agentctl.request(method, path, data=body)
        assert status == code, (path, body, status, data)
        assert data["success"] is False
        assert needle in data["message"], (path, data)

    big = '{"prompt": "' + "x" * (2 * 1024 * 1024) + '"}'
    status, data = await agentctl.request("POST", "/api/v1/start", data=big)
    assert status == 413
    assert data["error"] == "payload_too_large"
    assert "1048576" in data["message"]

    await agentctl.post("/api/v1/start", {})
    status, data = await agentctl.post("/api/v1/acp/session/load", {"session_id": "does-not-exist"})
    assert status == 404
    assert "does-not-exist" in data["message"]
    status, data = await agentctl.post("/api/v1/acp/session/new", {"cwd": "/nonexistent/dir"})
    assert status == 422
    assert "/nonexistent/dir" in data["message"]
    status, data = await agentctl.post("/api/v1/acp/prompt", {"prompt": [{"type": "bogus"}]})
    assert status == 422
    assert "prompt" in data["message"]


async def test_ws_unknown_frames_get_error_frames(agentctl: Agentctl) -> None:
    ws = await agentctl.ws("/api/v1/acp/stream")
    await ws.send('{"type": "ping"}')
    assert (await frames_until(ws, lambda f: True))[0] == {"type": "pong"}
    await ws.send("not json")
    assert (await frames_until(ws, lambda f: True))[0]["error"] == "invalid_json"
    await ws.send('{"type": "launch_missiles"}')
    frame = (await frames_until(ws, lambda f: True))[0]
    assert frame["error"] == "unknown_type"
    assert "launch_missiles" in frame["message"]


async def test_agent_printing_garbage_is_reported(agentctl: Agentctl) -> None:
    await agentctl.post("/api/v1/start", {})
    stream = await agentctl.ws("/api/v1/acp/stream")
    status, result = await agentctl.post("/api/v1/acp/prompt", {"prompt": "__garbage__ then carry on"})
    assert (status, result) == (200, {"stopReason": "end_turn"})
    frames = await frames_until(stream, lambda f: f["kind"] == "turn_end")
    errors = [f for f in frames if f["kind"] == "agent_error"]
    assert len(errors) == 1
    assert errors[0]["notification"]["error"] == "agent_protocol"
    assert "not JSON-RPC" in errors[0]["notification"]["message"]
    st = await agentctl.status()
    assert st["state"] == "running"
    assert "not JSON-RPC" in st["last_error"]


async def test_agent_dying_mid_turn_is_reported_and_recoverable(agentctl: Agentctl) -> None:
    _, start = await agentctl.post("/api/v1/start", {})
    stream = await agentctl.ws("/api/v1/acp/stream")
    status, data = await agentctl.post("/api/v1/acp/prompt", {"prompt": "__die__ now"})
    assert status == 502
    assert data["error"] == "agent_exited"
    frames = await frames_until(stream, lambda f: f["kind"] == "agent_error")
    assert "exited during a turn" in frames[-1]["notification"]["message"]
    assert "exited with code 3" in frames[-1]["notification"]["message"]

    async def failed() -> bool:
        st = await agentctl.status()
        return st["state"] == "error" and "exited with code 3" in (st["last_error"] or "")

    await wait_until(failed, "status to show the agent's death")
    st = await agentctl.status()
    assert st["acp"]["turn_running"] is False
    assert st["acp"]["initialized"] is False
    status, data = await agentctl.post("/api/v1/acp/prompt", {"prompt": "anyone?"})
    assert status == 409
    assert "exited with code 3" in data["message"]

    # Still serving: a new start respawns the agent and resumes the session.
    status, again = await agentctl.post("/api/v1/start", {})
    assert status == 200
    assert again["session_id"] == start["session_id"]
    assert again["resumed"] is True
    status, result = await agentctl.post("/api/v1/acp/prompt", {"prompt": "back again"})
    assert (status, result) == (200, {"stopReason": "end_turn"})
    assert (await agentctl.status())["attachments"] == 2


async def test_a_turn_cut_short_by_the_agents_end_names_how_it_ended(agentctl: Agentctl) -> None:
    await agentctl.post("/api/v1/start", {})
    # An earlier, unrelated error must not stand in for the cause.
    await agentctl.ok("POST", "/api/v1/acp/prompt", {"prompt": "__garbage__ first"})
    assert "not JSON-RPC" in (await agentctl.status())["last_error"]

    status, data = await agentctl.post("/api/v1/acp/prompt", {"prompt": "__die__ now"})
    assert status == 502
    assert "exited with code 3" in data["message"]
    assert "stderr: demo agent: exiting with code 3 on __die__" in data["message"]
    assert "not JSON-RPC" not in data["message"]
    turn_ends = [e for e in await agentctl.history() if e["kind"] == "turn_end"]
    assert turn_ends[-1]["notification"]["error"] == data["message"]
    assert "exited with code 3" in (await agentctl.status())["last_error"]

    await agentctl.post("/api/v1/start", {})
    pid = (await agentctl.status())["pid"]
    words = " ".join(f"w{i}" for i in range(200))
    turn = asyncio.create_task(agentctl.post("/api/v1/acp/prompt", {"prompt": f"__slow__ {words}"}))

    async def running() -> bool:
        return bool((await agentctl.status())["acp"]["turn_running"])

    await wait_until(running, "the slow turn to run")
    os.kill(pid, signal.SIGKILL)
    status, data = await turn
    assert status == 502
    assert f"agent (pid {pid}) was killed by signal {int(signal.SIGKILL)}" in data["message"]
    turn_ends = [e for e in await agentctl.history() if e["kind"] == "turn_end"]
    assert turn_ends[-1]["notification"]["error"] == data["message"]


async def test_updates_the_schema_rejects_are_journaled_with_one_warning_per_kind(agentctl: Agentctl) -> None:
    await agentctl.post("/api/v1/start", {})
    status, result = await agentctl.post("/api/v1/acp/prompt", {"prompt": "__odd__ ones"})
    assert (status, result) == (200, {"stopReason": "end_turn"})
    kinds = {u["sessionUpdate"] for u in ODD_UPDATES}
    journaled = [
        e["notification"]["update"]
        for e in await agentctl.history()
        if update_kind(e) in kinds and e["notification"]["update"] in ODD_UPDATES
    ]
    assert journaled == list(ODD_UPDATES)

    lines = [json.loads(line) for line in agentctl.log().splitlines()]
    warnings = [line for line in lines if line["level"] == "warning"]
    assert sorted(w["kind"] for w in warnings) == sorted(kinds)
    assert all("journaled as sent" in w["msg"] for w in warnings)
    assert [line["msg"] for line in lines if "exc" in line] == []
