"""Acceptance 1: both transports — health, start, prompt; updates arrive in order; prompt returns its stop reason."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.component.conftest import (
    DEFAULT_WAIT,
    Agentctl,
    FifoAgent,
    frames_until,
    message_text,
    update_kind,
    wait_until,
)


def assert_contiguous(frames: list[dict[str, Any]], first: int) -> None:
    seqs = [f["seq"] for f in frames]
    assert seqs == list(range(first, first + len(frames))), seqs


async def exercise(ctl: Agentctl, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{ctl.base}/health") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["status"] == "ok"
    assert body["timestamp"].endswith("Z")

    stream = await ctl.ws("/api/v1/acp/stream")
    status, start = await ctl.post("/api/v1/start", {"prompt": "hello transport"})
    assert status == 200, start
    assert start["success"] is True
    assert start["prompt_sent"] is True
    assert start["resumed"] is False
    assert start["current_mode_id"] == "ask"
    assert {m["id"] for m in start["available_modes"]} == {"ask", "code"}
    session_id = start["session_id"]

    first_turn = await frames_until(stream, lambda f: f["kind"] == "turn_end")
    assert_contiguous(first_turn, 1)
    kinds = [update_kind(f) for f in first_turn[:-1]]
    assert kinds[0] == "user_message_chunk"
    assert kinds.index("agent_thought_chunk") < kinds.index("tool_call") < kinds.index("tool_call_update")
    assert kinds.index("tool_call_update") < kinds.index("agent_message_chunk")
    assert message_text(first_turn) == "You said: hello transport "
    assert first_turn[-1]["notification"] == {"sessionId": session_id, "stopReason": "end_turn"}
    assert all(f["timestamp"].endswith("Z") and len(f["timestamp"]) == 24 for f in first_turn)

    status, result = await ctl.post("/api/v1/acp/prompt", {"prompt": "second turn"})
    assert (status, result) == (200, {"stopReason": "end_turn"})
    second_turn = await frames_until(stream, lambda f: f["kind"] == "turn_end")
    assert_contiguous(second_turn, first_turn[-1]["seq"] + 1)
    assert message_text(second_turn) == "You said: second turn "

    st = await ctl.status()
    assert st["state"] == "running"
    assert st["acp"]["initialized"] is True
    assert st["acp"]["session_id"] == session_id
    assert st["acp"]["turn_running"] is False
    assert st["acp"]["last_stop_reason"] == "end_turn"
    assert st["clients"]["updates"] == 1
    assert st["last_seq"] == second_turn[-1]["seq"]

    status, info = await ctl.get("/api/v1/info")
    assert status == 200
    assert info["agent_info"]["name"] == "agentsession-demo-agent"
    assert info["agent_capabilities"]["loadSession"] is True
    status, metrics = await ctl.get("/metrics")
    assert status == 200
    assert 'agentctl_turns_total{stop_reason="end_turn"} 2.0' in metrics
    assert 'agentctl_session_updates_total{type="agent_message_chunk"}' in metrics

    # The same call again is idempotent: same session, no second initial prompt.
    status, again = await ctl.post("/api/v1/start", {"prompt": "hello transport"})
    assert status == 200
    assert again["session_id"] == session_id
    assert again["prompt_sent"] is False
    history = await ctl.history()
    assert [e["seq"] for e in history] == list(range(1, len(history) + 1))
    assert sum(update_kind(e) == "user_message_chunk" for e in history) == 2


async def test_subprocess_transport(agentctl: Agentctl, http: aiohttp.ClientSession) -> None:
    await exercise(agentctl, http)
    assert (await agentctl.status())["transport"] == "subprocess"


async def test_fifo_transport(fifo_agentctl: tuple[Agentctl, FifoAgent], http: aiohttp.ClientSession) -> None:
    ctl, _agent = fifo_agentctl
    await exercise(ctl, http)
    assert (await ctl.status())["transport"] == "fifo"


async def test_fifo_agent_restart_is_detected_and_resumed(fifo_agentctl: tuple[Agentctl, FifoAgent]) -> None:
    ctl, agent = fifo_agentctl
    _, start = await ctl.post("/api/v1/start", {"prompt": "before restart"})
    await ctl.wait_turn_end()
    stream = await ctl.ws(f"/api/v1/acp/stream?after={(await ctl.status())['last_seq']}")

    await agent.kill()
    error = await frames_until(stream, lambda f: f["kind"] == "agent_error")
    assert "agent exited" in error[-1]["notification"]["message"]

    async def waiting() -> bool:
        st = await ctl.status()
        return st["state"] in ("error", "starting") and "agent exited" in (st["last_error"] or "")

    await wait_until(waiting, "status to report the agent's exit")

    await agent.start()  # the container restarts

    async def resumed() -> dict[str, Any] | None:
        st = await ctl.status()
        return st if st["state"] == "running" and st["acp"]["session_id"] == start["session_id"] else None

    await wait_until(resumed, "agentctl to re-attach and resume the session")
    status, result = await ctl.post("/api/v1/acp/prompt", {"prompt": "after restart"})
    assert (status, result) == (200, {"stopReason": "end_turn"})
    history = await ctl.history()
    users = [
        e["notification"]["update"]["content"]["text"]
        for e in history
        if update_kind(e) == "user_message_chunk"
    ]
    assert users == ["before restart", "after restart"]
    assert [e["seq"] for e in history] == list(range(1, len(history) + 1))


# Holds agent.in for reading after agent.out is closed, as an exiting process may: agentctl can attach to it and
# queue requests that nobody will read.
GHOST_AGENT = """
import os, sys, time
fifo_dir = sys.argv[1]
stdin = os.open(os.path.join(fifo_dir, "agent.in"), os.O_RDONLY)
os.close(os.open(os.path.join(fifo_dir, "agent.out"), os.O_WRONLY))
time.sleep(1.0)
os.close(stdin)
"""


async def test_fifo_reader_that_dies_after_attach_is_an_exit(
    fifo_agentctl: tuple[Agentctl, FifoAgent],
) -> None:
    ctl, agent = fifo_agentctl
    _, start = await ctl.post("/api/v1/start", {"prompt": "before the ghost"})
    await ctl.wait_turn_end()
    await agent.kill()

    async def reattaching() -> int | None:
        st = await ctl.status()
        return int(st["attachments"]) if st["state"] in ("error", "starting") else None

    attachments = await wait_until(reattaching, "agentctl to wait for a new agent")
    ghost = await asyncio.create_subprocess_exec(sys.executable, "-c", GHOST_AGENT, str(agent.fifo_dir))
    assert await asyncio.wait_for(ghost.wait(), DEFAULT_WAIT) == 0
    st = await ctl.status()
    assert st["attachments"] > attachments, "the ghost was never attached: the test proves nothing"
    assert st["state"] != "running"

    # Requests written to the ghost are not left behind: the real agent gets a fresh initialize and resumes.
    await agent.start()

    async def resumed() -> dict[str, Any] | None:
        st = await ctl.status()
        return st if st["state"] == "running" and st["acp"]["session_id"] == start["session_id"] else None

    await wait_until(resumed, "agentctl to attach to the real agent and resume the session")
    status, result = await ctl.post("/api/v1/acp/prompt", {"prompt": "after the ghost"})
    assert (status, result) == (200, {"stopReason": "end_turn"})


async def test_stream_resume_after_seq(agentctl: Agentctl) -> None:
    await agentctl.post("/api/v1/start", {"prompt": "one two three"})
    full = await agentctl.wait_turn_end()
    cut = full[3]["seq"]
    stream = await agentctl.ws(f"/api/v1/acp/stream?after={cut}")
    replay = await frames_until(stream, lambda f: f["kind"] == "turn_end")
    assert replay == full[4:]
    status, _ = await agentctl.post("/api/v1/acp/prompt", {"prompt": "live"})
    assert status == 200
    live = await frames_until(stream, lambda f: f["kind"] == "turn_end")
    assert live[0]["seq"] == full[-1]["seq"] + 1
    assert await agentctl.history(after=cut) == replay + live


@pytest.mark.parametrize("mode", ["code"])
async def test_set_mode_and_cancel(agentctl: Agentctl, mode: str) -> None:
    await agentctl.post("/api/v1/start", {})
    stream = await agentctl.ws("/api/v1/acp/stream")
    status, body = await agentctl.post("/api/v1/acp/mode", {"mode_id": mode})
    assert (status, body) == (200, {"success": True, "current_mode_id": mode})
    frames = await frames_until(stream, lambda f: update_kind(f) == "current_mode_update")
    assert frames[-1]["notification"]["update"]["currentModeId"] == mode
    assert (await agentctl.status())["acp"]["current_mode_id"] == mode

    status, body = await agentctl.post("/api/v1/acp/mode", {"mode_id": "nope"})
    assert status == 422
    assert "nope" in body["message"]

    words = " ".join(f"w{i}" for i in range(200))
    status, body = await agentctl.post("/api/v1/acp/prompt?wait=false", {"prompt": f"__slow__ {words}"})
    assert status == 202
    await frames_until(stream, lambda f: update_kind(f) == "agent_message_chunk")
    status, body = await agentctl.post("/api/v1/acp/cancel", {})
    assert status == 200
    end = await frames_until(stream, lambda f: f["kind"] == "turn_end")
    assert end[-1]["notification"]["stopReason"] == "cancelled"


async def test_a_pod_s_agent_is_initialized_before_any_start_and_its_readiness_says_so(
    tmp_path: Path, workdir: Path, spawn: Callable[..., Awaitable[Agentctl]]
) -> None:
    fifo_dir = tmp_path / "run-agentctl"
    ctl = await spawn("--agent-fifo-dir", str(fifo_dir))
    agent = FifoAgent(fifo_dir, workdir)
    try:
        assert _not_initialized(await _probe(ctl, ""))
        await agent.start()
        assert (await _probe(ctl, "?wait=10"))[0] == 200
        status = await ctl.status()
        assert (status["state"], status["acp"]["session_id"], status["attachments"]) == ("running", None, 1)

        # An agent that restarts before any session is initialized again.
        await agent.kill()
        await wait_until(lambda: _agent_health(ctl, 503), "the agent's readiness to say it is gone")
        await agent.start()
        assert (await _probe(ctl, "?wait=10"))[0] == 200

        # A start then only opens the session, on the attachment it finds.
        attachments = (await ctl.status())["attachments"]
        _, start = await ctl.post("/api/v1/start", {"prompt": "hello"})
        assert start["session_id"]
        assert not start["resumed"]
        assert (await ctl.status())["attachments"] == attachments
    finally:
        await ctl.stop()
        if agent.proc is not None and agent.proc.returncode is None:
            await agent.kill()


async def test_the_agent_s_readiness_waits_for_the_answer_and_refuses_bad_waits(agentctl: Agentctl) -> None:
    assert _not_initialized(await _probe(agentctl, "?wait=0"))
    assert (await _probe(agentctl, "?wait=-1"))[0] == 400
    waiting = asyncio.create_task(agentctl.get("/health/agent?wait=10"))
    await agentctl.ok("POST", "/api/v1/start", {})
    assert (await asyncio.wait_for(waiting, DEFAULT_WAIT))[0] == 200


def _not_initialized(reply: tuple[int, Any]) -> bool:
    status, body = reply
    return status == 503 and body["error"] == "agent_not_initialized" and "ACP initialize" in body["message"]


async def _probe(ctl: Agentctl, query: str) -> tuple[int, Any]:
    """The agent container's readiness probe, which the kubelet sends without a token."""
    async with ctl.http.get(f"{ctl.base}/health/agent{query}") as resp:
        return resp.status, await resp.json()


async def _agent_health(ctl: Agentctl, wanted: int) -> bool:
    return (await _probe(ctl, ""))[0] == wanted
