"""Whole sessions on a node, seen through the real gateway: the kubelet runs agentctl and the demo agent from the
project image, the operator runs on the host, and the test is a WebSocket client of both dialects.

- Suspend and resume move the session to a new pod: the history comes back whole and the initial prompt is not sent
  a second time.
- `lifecycle.idleTimeout` spares an agent that waits for a permission answer, counts shell input as activity, and
  suspends the session a timeout after the last of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.gateway.conftest import Client
from tests.support.gateway import initialize, of_type, prompt_and_wait, user_prompts
from tests.support.kube import Sessions
from tests.support.processes import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

TASK_DIALECT = "task-session.v1"


async def test_suspend_and_resume_bring_back_the_whole_history_without_resending_the_prompt(
    node_operator: OperatorProcess,
    sessions: Sessions,
    namespace: str,
    start_gateway: Any,
    connect: Callable[..., Awaitable[Client]],
) -> None:
    sessions.create("resumed", {"prompt": "the one initial prompt", "workspace": {"size": "64Mi"}})
    gateway = start_gateway("--namespace", namespace, "--insecure-dev-mode")
    agent_id = f"{namespace}/resumed"
    ui = await connect(gateway.ws_url)
    await sessions.until_ready("resumed")
    first_pod = sessions.pod("resumed").metadata.uid
    acp_session = sessions.get("resumed")["status"]["acp"]["sessionId"]

    # The initial prompt's turn may still be running when the session is Ready: wait for its end.
    await initialize(ui, agent_id, "before")
    await ui.wait_for("initial turn ended", of_type("agent_status", agentId=agent_id, status="ready"))
    await prompt_and_wait(ui, agent_id, "a second prompt before suspending")
    before = (await initialize(ui, agent_id, "before-suspend"))["updates"]
    assert user_prompts(before) == ["the one initial prompt", "a second prompt before suspending"]

    sessions.patch_spec("resumed", {"suspend": True})
    await asyncio.to_thread(
        wait_until, "Suspended=True", lambda: sessions.has_condition("resumed", "Suspended", "True"), 120
    )
    sessions.patch_spec("resumed", {"suspend": False})
    await sessions.until_ready("resumed")
    assert sessions.pod("resumed").metadata.uid != first_pod
    # session/load: the agent's own session goes on.
    assert sessions.get("resumed")["status"]["acp"]["sessionId"] == acp_session

    after = (await initialize(ui, agent_id, "after-resume"))["updates"]
    # Whole and once: the journal on the workspace volume outlived the pod, and the agent's replay of the loaded
    # session is not journaled a second time.
    assert after[: len(before)] == before
    assert user_prompts(after) == user_prompts(before), "the initial prompt was sent again on resume"

    await prompt_and_wait(ui, agent_id, "a prompt after resuming")
    final = (await initialize(ui, agent_id, "final"))["updates"]
    assert final[: len(before)] == before
    assert user_prompts(final) == [
        "the one initial prompt",
        "a second prompt before suspending",
        "a prompt after resuming",
    ]


IDLE = 4.0


def suspended_at(sessions: Sessions, name: str) -> datetime | None:
    found = sessions.has_condition(name, "Suspended", "True")
    return datetime.fromisoformat(found["lastTransitionTime"]) if found else None


async def hold_for(
    sessions: Sessions, name: str, seconds: float, every: Callable[[], Awaitable[None]]
) -> None:
    """Calls `every` each second for `seconds`, failing the moment the session asks to be suspended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        spec = (await asyncio.to_thread(sessions.get, name))["spec"]
        assert not spec.get("suspend"), f"suspended while it was busy (idleTimeout {IDLE}s)"
        await every()
        await asyncio.sleep(1.0)


async def test_idle_timeout_spares_a_waiting_permission_counts_shell_input_then_suspends(
    node_operator: OperatorProcess,
    sessions: Sessions,
    namespace: str,
    start_gateway: Any,
    connect: Callable[..., Awaitable[Client]],
) -> None:
    # The initial prompt asks for a permission, so the agent is busy from its first moment to the answer.
    sessions.create(
        "idler",
        {"prompt": "this needs a permission", "lifecycle": {"idleTimeout": f"{IDLE:.0f}s"},
         "workspace": {"emptyDir": True}},
    )  # fmt: skip
    gateway = start_gateway("--namespace", namespace, "--insecure-dev-mode")
    agent_id = f"{namespace}/idler"
    ui = await connect(gateway.ws_url)
    await sessions.until_ready("idler")
    await initialize(ui, agent_id, "init")
    asked = await ui.wait_for("the permission request", of_type("agent_permission_request"), within=60)

    async def nothing() -> None:
        return None

    # Three timeouts with a permission pending: never idle.
    await hold_for(sessions, "idler", 3 * IDLE, nothing)
    mark = len(ui.frames)
    await ui.send({"type": "agent_permission_response", "agentId": agent_id,
                   "permissionId": asked["payload"]["permissionId"], "optionId": "allow"})  # fmt: skip
    await ui.wait_for("turn end", of_type("agent_status", agentId=agent_id, status="ready"), since=mark)

    # Three timeouts of typing into the shell: never idle either.
    shell = await connect(gateway.ws_url, protocols=(TASK_DIALECT,))
    subscribed = await shell.request(
        {"id": "sub", "type": "request", "action": "shell.subscribe", "payload": {"task_id": agent_id}},
        lambda f: f.get("id") == "sub", "shell.subscribe answer",
    )  # fmt: skip
    assert subscribed["type"] == "response", subscribed
    typed = 0

    async def type_a_line() -> None:
        nonlocal typed
        typed += 1
        answer = await shell.request(
            {"id": f"in{typed}", "type": "request", "action": "shell.input",
             "payload": {"task_id": agent_id, "data": f"echo typed {typed}\n"}},
            lambda f: f.get("id") == f"in{typed}", "shell.input answer",
        )  # fmt: skip
        assert answer["type"] == "response", answer

    await hold_for(sessions, "idler", 3 * IDLE, type_a_line)
    last_input = datetime.now(UTC)

    # Then quiet: suspended, no sooner than a timeout after the last keystroke.
    when = await asyncio.to_thread(
        wait_until, "suspended when idle", lambda: suspended_at(sessions, "idler"), 60
    )
    # Condition times have whole seconds.
    assert when >= last_input + timedelta(seconds=IDLE - 1), (when, last_input)
    await asyncio.to_thread(
        wait_until, "an IdleTimeout event", lambda: sessions.has_events("idler", "IdleTimeout"), 30
    )
