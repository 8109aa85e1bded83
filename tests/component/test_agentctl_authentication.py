"""An agent that asks for authentication before a session (Codex without a configured provider) gets the API-key
methods it offers, in its order, from agentctl's start."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable

from tests.component.conftest import VENV_BIN, Agentctl

AGENT = shlex.join([str(VENV_BIN / "agentsession-demo-agent"), "--key-variable", "DEMO_API_KEY"])


async def test_start_authenticates_with_the_agents_key_method(
    spawn: Callable[..., Awaitable[Agentctl]],
) -> None:
    ctl = await spawn("--agent-command", AGENT, env={"DEMO_API_KEY": "k"})
    status, start = await ctl.post("/api/v1/start", {"prompt": "hello"})
    assert status == 200, start
    assert start["session_id"]
    assert start["prompt_sent"] is True


async def test_without_the_key_start_says_which_methods_were_refused(
    spawn: Callable[..., Awaitable[Agentctl]],
) -> None:
    ctl = await spawn("--agent-command", AGENT)
    status, start = await ctl.post("/api/v1/start", {})
    assert status == 502, start
    assert start["error"] == "agent_auth_required"
    assert "unset-key" in start["message"]
    assert "key: " in start["message"]
    assert "credentialsSecretRef" in start["message"]
