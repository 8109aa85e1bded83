"""The processes agentctl starts do not get its token or any other AGENTCTL_* setting."""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.component.conftest import TOKEN, VENV_BIN, Agentctl, wait_until

LEAKS = {"AGENTCTL_TOKEN", "AGENTCTL_SOMETHING_ELSE"}


def env_names(text: str) -> set[str]:
    return {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}


async def test_agent_and_shell_do_not_inherit_agentctl_settings(
    tmp_path: Path, spawn: Callable[..., Awaitable[Agentctl]]
) -> None:
    dump = tmp_path / "agent-env.txt"
    agent = shlex.join(
        ["sh", "-c", f'env > {shlex.quote(str(dump))}; exec "$0"', str(VENV_BIN / "agentsession-demo-agent")]
    )
    ctl = await spawn(
        "--agent-command",
        agent,
        "--shell",
        "/bin/sh",
        env={"AGENTCTL_SOMETHING_ELSE": "agentctl-only", "AGENT_VISIBLE": "for-the-agent"},
    )
    status, start = await ctl.post("/api/v1/start", {})
    assert status == 200, start
    names = env_names(dump.read_text())
    assert "AGENT_VISIBLE" in names  # the rest of agentctl's environment is still the agent's
    assert not names & LEAKS
    assert TOKEN not in dump.read_text()

    ws = await ctl.ws("/api/v1/shell/stream")
    # The marker is computed, so the echoed command line does not match it.
    await ws.send(json.dumps({"type": "input", "data": "env; echo env-done-$((1 + 1))\n"}))

    async def shell_env() -> str | None:
        _, buf = await ctl.get("/api/v1/shell/buffer")
        text: str = buf["buffer"].replace("\r\n", "\n")
        return text if "env-done-2" in text else None

    names = env_names(await wait_until(shell_env, "the shell's env output"))
    assert "AGENT_VISIBLE" in names
    assert not names & LEAKS
