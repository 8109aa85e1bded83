"""Acceptance 3: permission requests reach the stream, answers reach the agent, silence times out to cancelled."""

from __future__ import annotations

from tests.component.conftest import Agentctl, frames_until, message_text


async def test_permission_answered(agentctl: Agentctl) -> None:
    await agentctl.post("/api/v1/start", {})
    perms = await agentctl.ws("/api/v1/acp/permissions/stream")
    updates = await agentctl.ws("/api/v1/acp/stream")
    snapshot = await frames_until(perms, lambda f: True)
    assert snapshot[0]["kind"] == "pending_snapshot"
    assert snapshot[0]["pending"] == []

    status, _ = await agentctl.post("/api/v1/acp/prompt?wait=false", {"prompt": "may I have permission"})
    assert status == 202
    request = (await frames_until(perms, lambda f: f["kind"] == "permission_request"))[-1]
    on_updates = await frames_until(updates, lambda f: f["kind"] == "permission_request")
    assert on_updates[-1] == request
    pending = request["notification"]
    assert [o["optionId"] for o in pending["options"]] == ["allow", "reject"]
    assert pending["tool_call"]["toolCallId"] == "call-1"

    status, listed = await agentctl.get("/api/v1/acp/permissions")
    assert status == 200
    assert [p["pending_id"] for p in listed["pending"]] == [pending["pending_id"]]

    status, body = await agentctl.post(
        "/api/v1/acp/permissions/respond", {"pending_id": pending["pending_id"], "option_id": "nope"}
    )
    assert status == 422
    assert "nope" in body["message"]
    status, body = await agentctl.post(
        "/api/v1/acp/permissions/respond",
        {"pending_id": pending["pending_id"], "option_id": "allow", "cancelled": True},
    )
    assert status == 422
    status, body = await agentctl.post(
        "/api/v1/acp/permissions/respond", {"pending_id": pending["pending_id"], "option_id": "reject"}
    )
    assert status == 200
    assert body["outcome"] == {"outcome": "selected", "optionId": "reject"}

    resolved = (await frames_until(perms, lambda f: f["kind"] == "permission_resolved"))[-1]
    assert resolved["notification"]["reason"] == "responded"
    assert resolved["seq"] > request["seq"]
    turn = await frames_until(updates, lambda f: f["kind"] == "turn_end")
    assert "Permission outcome: selected reject." in message_text(turn)
    assert not (agentctl.workdir / "demo.txt").exists(), "a rejected write was written"

    status, body = await agentctl.post(
        "/api/v1/acp/permissions/respond", {"pending_id": pending["pending_id"], "cancelled": True}
    )
    assert status == 404
    assert pending["pending_id"] in body["message"]


async def test_an_allowed_write_is_written(agentctl: Agentctl) -> None:
    await agentctl.post("/api/v1/start", {})
    perms = await agentctl.ws("/api/v1/acp/permissions/stream")
    updates = await agentctl.ws("/api/v1/acp/stream")
    await agentctl.post("/api/v1/acp/prompt?wait=false", {"prompt": "write it, with permission"})
    request = (await frames_until(perms, lambda f: f["kind"] == "permission_request"))[-1]
    status, _ = await agentctl.post(
        "/api/v1/acp/permissions/respond",
        {"pending_id": request["notification"]["pending_id"], "option_id": "allow"},
    )
    assert status == 200
    await frames_until(updates, lambda f: f["kind"] == "turn_end")
    assert (agentctl.workdir / "demo.txt").read_text() == "Written by the demo agent in turn 1.\n"


async def test_unanswered_permission_times_out_to_cancelled(agentctl: Agentctl) -> None:
    await agentctl.post("/api/v1/start", {})
    updates = await agentctl.ws("/api/v1/acp/stream")
    status, result = await agentctl.post("/api/v1/acp/prompt", {"prompt": "permission please"})
    # The prompt call returns only after the 3 s permission timeout ended the wait.
    assert (status, result) == (200, {"stopReason": "end_turn"})
    frames = await frames_until(updates, lambda f: f["kind"] == "turn_end")
    resolved = [f for f in frames if f["kind"] == "permission_resolved"]
    assert len(resolved) == 1
    assert resolved[0]["notification"]["outcome"] == {"outcome": "cancelled"}
    assert resolved[0]["notification"]["reason"] == "timeout"
    assert "Permission outcome: cancelled." in message_text(frames)
    assert (await agentctl.get("/api/v1/acp/permissions"))[1]["pending"] == []
