"""Modes that an agent offers only as a session config option (as Codex does) are agentctl's modes all the same."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from tests.component.conftest import VENV_BIN, Agentctl, frames_until, update_kind

# The demo agent refuses session/set_mode in this shape, so every mode change below went through
# session/set_config_option.
MODE_OPTION_AGENT = shlex.join([str(VENV_BIN / "agentsession-demo-agent"), "--modes-as-config-option"])


def mode_values(entry: dict[str, Any]) -> list[str]:
    options = entry["notification"]["update"]["configOptions"]
    return [o["currentValue"] for o in options if o["category"] == "mode"]


async def test_mode_config_option_is_shown_and_set_as_modes(
    spawn: Callable[..., Awaitable[Agentctl]],
) -> None:
    ctl = await spawn("--agent-command", MODE_OPTION_AGENT)
    stream = await ctl.ws("/api/v1/acp/stream")
    status, start = await ctl.post("/api/v1/start", {"mode_id": "code"})
    assert status == 200, start
    assert [m["id"] for m in start["available_modes"]] == ["ask", "code"]
    assert start["available_modes"][1]["name"] == "Code"
    assert start["current_mode_id"] == "code"
    frames = await frames_until(stream, lambda f: update_kind(f) == "config_option_update")
    assert mode_values(frames[-1]) == ["code"]

    status, body = await ctl.post("/api/v1/acp/mode", {"mode_id": "ask"})
    assert (status, body) == (200, {"success": True, "current_mode_id": "ask"})
    acp = (await ctl.status())["acp"]
    assert acp["current_mode_id"] == "ask"
    assert [m["id"] for m in acp["available_modes"]] == ["ask", "code"]
    status, body = await ctl.post("/api/v1/acp/mode", {"mode_id": "nope"})
    assert status == 422
    assert "nope" in body["message"]

    # The agent changes its mode by itself: its config_option_update is journaled and becomes the mode.
    status, result = await ctl.post("/api/v1/acp/prompt", {"prompt": "__mode code__ now"})
    assert (status, result) == (200, {"stopReason": "end_turn"})
    changes = [e for e in await ctl.history() if update_kind(e) == "config_option_update"]
    assert [mode_values(e) for e in changes] == [["code"], ["ask"], ["code"]]
    assert (await ctl.status())["acp"]["current_mode_id"] == "code"
    await ctl.stop()

    # A restarted agentctl resumes the session and finds the modes in the session/load answer.
    again = await spawn("--agent-command", MODE_OPTION_AGENT)
    status, resumed = await again.post("/api/v1/start", {})
    assert status == 200, resumed
    assert resumed["resumed"] is True
    assert [m["id"] for m in resumed["available_modes"]] == ["ask", "code"]
    assert resumed["current_mode_id"] == "code"
