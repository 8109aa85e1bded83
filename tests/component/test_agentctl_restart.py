"""Acceptance 2: agentctl restarted mid-session resumes with session/load; history is whole, once; no re-prompt."""

from __future__ import annotations

import shlex
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from agentsession.agentctl.bridge.intake import CONVERSATION_KINDS
from tests.component.conftest import VENV_BIN, Agentctl, frames_until, update_kind, wait_until


def user_texts(history: list[dict[str, Any]]) -> list[str]:
    return [
        e["notification"]["update"]["content"]["text"]
        for e in history
        if update_kind(e) == "user_message_chunk"
    ]


async def test_restart_mid_turn_resumes_with_load(spawn: Callable[..., Awaitable[Agentctl]]) -> None:
    first = await spawn()
    status, start = await first.post("/api/v1/start", {"prompt": "initial prompt"})
    assert status == 200
    session_id = start["session_id"]
    await first.wait_turn_end()
    stream = await first.ws("/api/v1/acp/stream?after=0")
    words = " ".join(f"w{i}" for i in range(100))
    status, _ = await first.post("/api/v1/acp/prompt?wait=false", {"prompt": f"__slow__ {words}"})
    assert status == 202
    await frames_until(stream, lambda f: update_kind(f) == "agent_message_chunk" and "w3 " in str(f))
    before = await first.history()
    assert await first.stop(signal.SIGKILL) == -signal.SIGKILL  # no chance to clean up

    second = await spawn()
    status, resumed = await second.post(
        "/api/v1/start", {"session_id": session_id, "prompt": "initial prompt"}
    )
    assert status == 200, resumed
    assert resumed["session_id"] == session_id
    assert resumed["resumed"] is True
    assert resumed["prompt_sent"] is False

    after_restart = await second.history()
    # Everything journaled before the kill is there, unchanged; the agent's replay added nothing.
    assert after_restart[: len(before)] == before
    # The turn the kill cut short has its end, so no reader of the history waits for it.
    ends = [e["notification"] for e in after_restart if e["kind"] == "turn_end"]
    assert [end["stopReason"] for end in ends] == ["end_turn", "error"]
    assert ends[-1]["sessionId"] == session_id
    assert "agentctl stopped during this turn" in ends[-1]["error"]
    assert after_restart[-1]["kind"] == "turn_end"
    assert [e["seq"] for e in after_restart] == list(range(1, len(after_restart) + 1))
    assert user_texts(after_restart) == ["initial prompt", f"__slow__ {words}"]
    st = await second.status()
    assert st["acp"]["session_id"] == session_id
    assert st["attachments"] == 1

    status, result = await second.post("/api/v1/acp/prompt", {"prompt": "after restart"})
    assert (status, result) == (200, {"stopReason": "end_turn"})
    final = await second.history()
    assert [e["seq"] for e in final] == list(range(1, len(final) + 1))
    assert user_texts(final) == ["initial prompt", f"__slow__ {words}", "after restart"]
    entries = [(e["kind"], str(e["notification"])) for e in final]
    assert len({e["seq"] for e in final}) == len(final)
    assert entries.count(entries[0]) == 1  # the first prompt was neither re-sent nor re-journaled


async def test_restart_without_session_id_uses_recorded_session(
    spawn: Callable[..., Awaitable[Agentctl]],
) -> None:
    first = await spawn()
    _, start = await first.post("/api/v1/start", {"prompt": "only once"})
    await first.wait_turn_end()
    await first.stop()

    second = await spawn()
    status, again = await second.post("/api/v1/start", {"prompt": "only once"})
    assert status == 200
    assert again["session_id"] == start["session_id"]
    assert again["resumed"] is True
    assert again["prompt_sent"] is False

    async def settled() -> bool:
        return not (await second.status())["acp"]["turn_running"]

    await wait_until(settled, "no turn running")
    assert user_texts(await second.history()) == ["only once"]


async def test_a_history_streamed_after_the_load_answer_is_not_journaled_again(
    spawn: Callable[..., Awaitable[Agentctl]],
) -> None:
    """gemini-cli answers session/load first and replays the conversation after: that tail is replay too."""
    agent = shlex.join([str(VENV_BIN / "agentsession-demo-agent"), "--replay-after-load"])
    first = await spawn("--agent-command", agent)
    status, start = await first.post("/api/v1/start", {"prompt": "initial prompt"})
    assert status == 200, start
    await first.wait_turn_end()
    before = await first.history()
    await first.stop()

    second = await spawn("--agent-command", agent)
    status, resumed = await second.post("/api/v1/start", {"session_id": start["session_id"]})
    assert status == 200, resumed
    assert resumed["resumed"] is True
    replayed = sum(1 for e in before if update_kind(e) in CONVERSATION_KINDS)

    async def replay_seen() -> bool:
        _, text = await second.get("/metrics")
        return f'agentctl_session_updates_total{{type="replayed"}} {float(replayed)}' in text

    await wait_until(replay_seen, f"{replayed} replayed updates")
    assert await second.history() == before
    status, result = await second.post("/api/v1/acp/prompt", {"prompt": "after restart"})
    assert (status, result) == (200, {"stopReason": "end_turn"})
    assert user_texts(await second.history()) == ["initial prompt", "after restart"]


async def test_an_agent_that_cannot_load_its_session_continues_in_a_new_one(
    spawn: Callable[..., Awaitable[Agentctl]],
) -> None:
    """An agent that answers session/load with an error (not one that is gone) does not leave the session
    stuck: a new ACP session, the history from the journal, and the initial prompt not sent again."""
    first = await spawn()
    status, start = await first.post("/api/v1/start", {"prompt": "initial prompt"})
    assert status == 200, start
    await first.wait_turn_end()
    before = await first.history()
    await first.stop()

    forgetful = shlex.join([str(VENV_BIN / "agentsession-demo-agent"), "--forget-sessions"])
    second = await spawn("--agent-command", forgetful)
    status, resumed = await second.post("/api/v1/start", {"session_id": start["session_id"]})
    assert status == 200, resumed
    assert resumed["resumed"] is False
    assert resumed["session_id"] != start["session_id"]
    assert "No previous sessions found" in resumed["load_error"]
    assert resumed["prompt_sent"] is False
    assert await second.history() == before
