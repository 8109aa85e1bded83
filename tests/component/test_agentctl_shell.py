"""Acceptance 4: shell input runs in the workspace, output streams back, the buffer keeps the recent output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.component.conftest import Agentctl, frames_until, wait_until


def output_contains(needle: str) -> Callable[[dict[str, Any]], bool]:
    seen: list[str] = []

    def check(frame: dict[str, Any]) -> bool:
        if frame.get("type") == "output":
            seen.append(str(frame["data"]))
        return needle in "".join(seen)

    return check


async def test_shell_runs_in_workspace_and_streams(agentctl: Agentctl) -> None:
    ws = await agentctl.ws("/api/v1/shell/stream")
    await ws.send(json.dumps({"type": "input", "data": "echo marker-$((40 + 2)); pwd\n"}))
    await frames_until(ws, output_contains(f"marker-42\r\n{agentctl.workdir}"))

    status, st = await agentctl.get("/api/v1/shell/status")
    assert status == 200
    assert st["running"] is True
    assert st["cwd"] == str(agentctl.workdir)
    assert st["clients"] == 1

    status, buf = await agentctl.get("/api/v1/shell/buffer")
    assert status == 200
    assert "marker-42" in buf["buffer"]

    await ws.send(json.dumps({"type": "ping"}))
    await frames_until(ws, lambda f: f.get("type") == "pong")
    await ws.send(json.dumps({"type": "resize", "cols": 120, "rows": 40}))
    await ws.send(json.dumps({"type": "input", "data": "stty size\n"}))
    await frames_until(ws, output_contains("40 120"))
    await ws.send(json.dumps({"type": "input", "data": 7}))
    assert (await frames_until(ws, lambda f: f.get("type") == "error"))[-1]["error"] == "bad_frame"
    await ws.send(json.dumps({"type": "exec"}))
    assert (await frames_until(ws, lambda f: f.get("type") == "error"))[-1]["error"] == "unknown_type"


async def test_buffer_keeps_last_16_kib(agentctl: Agentctl) -> None:
    ws = await agentctl.ws("/api/v1/shell/stream")
    await ws.send(
        json.dumps(
            {
                "type": "input",
                "data": "i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done; echo done-$i\n",
            }
        )
    )
    await frames_until(ws, output_contains("done-3000"), within=30)

    async def buffered() -> str | None:
        _, buf = await agentctl.get("/api/v1/shell/buffer")
        text: str = buf["buffer"]
        return text if "done-3000" in text else None

    text = await wait_until(buffered, "the buffer to hold the latest output")
    size = len(text.encode())
    assert 15 * 1024 < size <= 16 * 1024
    assert "line-2999" in text
    assert "line-10\r\n" not in text  # the oldest output was dropped
