"""The one reducer from an agent's journal entries to its live state, which agentctl and the gateway share."""

from __future__ import annotations

from typing import Any

import pytest

from agentsession.api.acp import MODE_ID_MAX_CHARS
from agentsession.contract.live_state import LiveState, after_entry, mode_after

MODE_OPTION = {"id": "mode", "category": "mode", "type": "select", "currentValue": "plan", "options": []}
TOO_LONG = "m" * (MODE_ID_MAX_CHARS + 1)


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        ({"sessionUpdate": "current_mode_update", "currentModeId": "code"}, "code"),
        (
            {"sessionUpdate": "current_mode_update", "currentModeId": "m" * MODE_ID_MAX_CHARS},
            "m" * MODE_ID_MAX_CHARS,
        ),
        ({"sessionUpdate": "current_mode_update", "currentModeId": TOO_LONG}, "ask"),
        ({"sessionUpdate": "current_mode_update", "currentModeId": 7}, "ask"),
        ({"sessionUpdate": "current_mode_update"}, "ask"),
        ({"sessionUpdate": "config_option_update", "configOptions": [MODE_OPTION]}, "plan"),
        (
            {
                "sessionUpdate": "config_option_update",
                "configOptions": [{**MODE_OPTION, "currentValue": TOO_LONG}],
            },
            None,
        ),
        (
            {"sessionUpdate": "config_option_update", "configOptions": [{**MODE_OPTION, "id": TOO_LONG}]},
            "ask",
        ),
        (
            {
                "sessionUpdate": "config_option_update",
                "configOptions": [{**MODE_OPTION, "category": "model"}],
            },
            "ask",
        ),
        ({"sessionUpdate": "config_option_update", "configOptions": "not a list"}, "ask"),
        ({"sessionUpdate": "agent_message_chunk", "currentModeId": "code"}, "ask"),
    ],
)
def test_the_mode_after_an_update(update: dict[str, Any], expected: str | None) -> None:
    assert mode_after(update, "ask") == expected


def chunk(kind: str, **fields: Any) -> dict[str, Any]:
    return {"sessionId": "s", "update": {"sessionUpdate": kind, **fields}}


def test_a_prompt_starts_a_turn_and_its_end_ends_it() -> None:
    idle = LiveState("running", current_mode_id="ask")
    turn = after_entry(
        idle, "session_update", chunk("user_message_chunk", content={"type": "text", "text": "hi"})
    )
    assert turn == LiveState("running", turn_running=True, current_mode_id="ask")
    assert after_entry(turn, "session_update", chunk("agent_message_chunk")) == turn
    assert after_entry(turn, "turn_end", {"stopReason": "end_turn"}) == idle
    # A prompt seen before any status said so: the agent runs.
    assert after_entry(LiveState(), "session_update", chunk("user_message_chunk")).agent_state == "running"
    assert (
        after_entry(LiveState("starting"), "session_update", chunk("user_message_chunk")).agent_state
        == "starting"
    )


def test_an_update_moves_the_mode_and_keeps_the_turn() -> None:
    turn = LiveState("running", turn_running=True, current_mode_id="ask")
    moved = after_entry(turn, "session_update", chunk("current_mode_update", currentModeId="code"))
    assert moved == LiveState("running", turn_running=True, current_mode_id="code")


def test_an_agent_error_ends_the_turn_and_says_why() -> None:
    turn = LiveState("running", turn_running=True, current_mode_id="ask")
    assert after_entry(turn, "agent_error", {"message": "agent exited with 1"}) == LiveState(
        "error", False, "agent exited with 1", "ask"
    )
    assert after_entry(turn, "agent_error", {"code": 3}).last_error == "{'code': 3}"


def test_entries_that_say_nothing_of_the_state_leave_it() -> None:
    turn = LiveState("running", turn_running=True, current_mode_id="ask")
    assert after_entry(turn, "session_update", {"update": "not an update"}) == turn
    assert after_entry(turn, "session_update", {}) == turn
    assert after_entry(turn, "permission_request", {"toolCall": {}}) == turn
