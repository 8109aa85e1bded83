"""A hostile agent against real agentctl processes: what it writes on stdout cannot wedge the session, swell
agentctl's memory, or make agentctl report a working agent that is not.

The agent is tests/support/hostile_agent.py, line-based JSON-RPC without the SDK, so each test sends exactly the
bytes it names. After each attack the session answers the next prompt; where the ACP connection is really lost (a
failure of the SDK's receive loop, injected by tests/support/acp_fault), agentctl says so: state `error` with the
reason, `/health/agent` failing, and the agent stopped, so that a pod's agent container restarts and resumes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from benchmarks.procfs import rss_bytes

from agentsession.agentctl.agent_input import MAX_DEPTH
from agentsession.agentctl.permissions import MAX_PENDING
from agentsession.agentctl.transport import LINE_LIMIT
from agentsession.api.acp import LABEL_MAX_CHARS, MODES_MAX
from tests.component.conftest import Agentctl, child_env, wait_until

Spawn = Callable[..., Awaitable[Agentctl]]
SUPPORT = Path(__file__).resolve().parents[1] / "support"
HOSTILE_AGENT = SUPPORT / "hostile_agent.py"
FAULT_DIR = SUPPORT / "acp_fault"
MIB = 1024 * 1024
# agentctl's memory limit in a pod is 256Mi; one hostile line may not take it past half of that. Before the bounds,
# a line of 50 MiB took it to 209 MiB and one of 6 MiB of empty objects to 228 MiB.
PEAK_LIMIT = 128 * MIB
# What the agent says of itself, as agentctl answers it. Before the bounds: 8.2 MB for start and status.
DESCRIPTION_LIMIT = 64 * 1024


def hostile_command(*args: str) -> str:
    return shlex.join([sys.executable, str(HOSTILE_AGENT), *args])


def fault_env() -> dict[str, str]:
    """Puts the receive-loop fault of tests/support/acp_fault into agentctl."""
    return {"PYTHONPATH": os.pathsep.join([str(FAULT_DIR), os.environ.get("PYTHONPATH", "")])}


async def started(spawn: Spawn, *agent_args: str, env: dict[str, str] | None = None) -> Agentctl:
    ctl = await spawn("--agent-command", hostile_command(*agent_args), "--permission-timeout", "30", env=env)
    status, body = await ctl.post("/api/v1/start", {})
    assert status == 200, body
    return ctl


async def prompt(ctl: Agentctl, text: str) -> tuple[int, Any]:
    return await asyncio.wait_for(ctl.post("/api/v1/acp/prompt", {"prompt": text}), 60)


async def agent_health(ctl: Agentctl) -> int:
    async with ctl.http.get(f"{ctl.base}/health/agent") as resp:
        return resp.status


async def assert_usable(ctl: Agentctl) -> None:
    """The session answers a prompt, and agentctl says the agent is there and ready."""
    assert await prompt(ctl, "still there?") == (200, {"stopReason": "end_turn"})
    assert (await ctl.status())["state"] == "running"
    assert await agent_health(ctl) == 200


def peak(ctl: Agentctl) -> int:
    value = rss_bytes(ctl.proc.pid, "VmHWM")
    assert value is not None
    return value


def errors(history: list[dict[str, Any]]) -> list[str]:
    return [e["notification"]["message"] for e in history if e["kind"] == "agent_error"]


async def test_a_line_nested_past_any_parser_is_dropped_and_the_session_goes_on(spawn: Spawn) -> None:
    # Before: RecursionError ended the SDK's receive loop; agentctl said running, /health/agent 200, and every
    # prompt after it failed with 502.
    ctl = await started(spawn)
    assert await prompt(ctl, "__nested__ then answer") == (200, {"stopReason": "end_turn"})
    status = await ctl.status()
    assert f"nests deeper than {MAX_DEPTH} levels" in status["last_error"]
    assert len(errors(await ctl.history())) == 1
    await assert_usable(ctl)


@pytest.mark.parametrize(
    ("cue", "why"),
    [
        ("__nested_answer__", f"nests deeper than {MAX_DEPTH} levels"),
        ("__huge_answer__", f"over the limit of {LINE_LIMIT // MIB} MiB"),
        ("__malformed_error__", "its error is not an object"),
    ],
)
async def test_an_answer_agentctl_refuses_ends_its_call_and_not_the_session(
    spawn: Spawn, cue: str, why: str
) -> None:
    # Before: the turn waited for ever (the answer was dropped, or its error ended the receive loop after the SDK
    # had taken the call off its books), and every later prompt was refused as "a turn is running".
    ctl = await started(spawn)
    status, body = await prompt(ctl, cue)
    assert status == 502, body
    assert body["error"] == "agent_protocol"
    assert body["message"].startswith("agentctl refused the agent's answer to session/prompt: ")
    assert why in body["message"]
    turn_end = [e for e in await ctl.history() if e["kind"] == "turn_end"][-1]
    assert turn_end["notification"]["stopReason"] == "error"
    assert peak(ctl) < PEAK_LIMIT
    await assert_usable(ctl)


@pytest.mark.parametrize(
    ("cue", "why"),
    [
        ("__huge__", f"over the limit of {LINE_LIMIT // MIB} MiB"),
        ("__costly__", "MiB to parse"),
    ],
)
async def test_lines_too_long_or_too_dear_to_parse_are_refused_within_memory(
    spawn: Spawn, cue: str, why: str
) -> None:
    ctl = await started(spawn)
    assert await prompt(ctl, f"{cue} then answer") == (200, {"stopReason": "end_turn"})
    assert why in (await ctl.status())["last_error"]
    assert peak(ctl) < PEAK_LIMIT, f"agentctl peaked at {peak(ctl) // MIB} MiB"
    await assert_usable(ctl)


async def test_json_rpc_the_sdk_cannot_act_on_is_dropped(spawn: Spawn) -> None:
    # Before: an array as an id ended the receive loop (the SDK looks the id up in a dict), as did a string as
    # the error of an answer.
    ctl = await started(spawn)
    assert await prompt(ctl, "__bad_envelopes__ __deep_update__ __garbage__") == (
        200,
        {"stopReason": "end_turn"},
    )
    reported = errors(await ctl.history())
    assert len(reported) == 5, reported
    assert sum("its id is neither a string, an integer nor null" in e for e in reported) == 2
    assert sum("its method is not a string" in e for e in reported) == 1
    assert sum(f"nests deeper than {MAX_DEPTH} levels" in e for e in reported) == 1
    assert sum("not JSON:" in e for e in reported) == 1
    await assert_usable(ctl)


async def test_a_failed_receive_loop_fails_the_bridge_and_stops_the_agent(spawn: Spawn) -> None:
    """Whatever ends the SDK's receive loop (here an injected failure), no answer can come any more: agentctl
    stops the agent and says why; a start brings a new agent and a session that answers."""
    ctl = await started(spawn, env=fault_env())
    pid = (await ctl.status())["pid"]
    status, body = await prompt(ctl, "__loop_killer__")
    assert status == 502, body
    assert "agentctl stopped reading the agent's messages" in body["message"]
    assert "RuntimeError" not in body["message"]  # no internals for clients; agentctl's log has the traceback

    async def failed() -> dict[str, Any] | None:
        st = await ctl.status()
        return st if st["state"] == "error" else None

    st = await wait_until(failed, "agentctl to report the lost connection")
    assert "agentctl lost the ACP connection to the agent during a turn" in st["last_error"]
    assert "agentctl stopped the agent" in st["last_error"]
    assert st["acp"]["initialized"] is False
    assert await agent_health(ctl) == 503

    async def agent_gone() -> bool:
        return rss_bytes(pid) is None

    await wait_until(agent_gone, "agentctl to stop the agent whose connection it lost")
    assert "injected failure of the receive loop" in ctl.log()
    status, body = await prompt(ctl, "anyone?")
    assert status == 409
    assert "lost the ACP connection" in body["message"]

    status, body = await ctl.post("/api/v1/start", {})
    assert status == 200, body
    await assert_usable(ctl)
    assert (await ctl.status())["pid"] != pid


class FifoHostileAgent:
    """The agent container of a pod, running the hostile agent on agentctl's FIFOs; `restart` is the kubelet's."""

    def __init__(self, fifo_dir: Path, workdir: Path) -> None:
        self.fifo_dir = fifo_dir
        self.workdir = workdir
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        async def fifos() -> bool:
            return (self.fifo_dir / "agent.in").exists() and (self.fifo_dir / "agent.out").exists()

        await wait_until(fifos, "agentctl to create the FIFOs", interval=0.02)
        self.proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            f'exec "$@" <{self.fifo_dir}/agent.in >{self.fifo_dir}/agent.out',
            "--",
            sys.executable,
            str(HOSTILE_AGENT),
            cwd=self.workdir,
            env=child_env(),
            start_new_session=True,
        )

    async def exited(self, within: float) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), within)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()


@pytest.fixture
async def fifo_agents(tmp_path: Path, workdir: Path) -> AsyncIterator[Callable[[Path], FifoHostileAgent]]:
    agents: list[FifoHostileAgent] = []

    def make(fifo_dir: Path) -> FifoHostileAgent:
        agents.append(FifoHostileAgent(fifo_dir, workdir))
        return agents[-1]

    yield make
    for agent in agents:
        await agent.stop()


async def test_in_a_pod_a_lost_connection_ends_the_agent_and_its_restart_resumes(
    tmp_path: Path, spawn: Spawn, fifo_agents: Callable[[Path], FifoHostileAgent]
) -> None:
    """The FIFO transport cannot kill the agent in its own container: agentctl closes its input, the agent ends
    (so its container restarts), readiness fails meanwhile, and agentctl resumes with the restarted agent."""
    fifo_dir = tmp_path / "run-agentctl"
    ctl = await spawn("--agent-fifo-dir", str(fifo_dir), env=fault_env())
    first = fifo_agents(fifo_dir)
    await first.start()
    status, body = await ctl.post("/api/v1/start", {})
    assert status == 200, body
    assert await agent_health(ctl) == 200

    status, body = await prompt(ctl, "__loop_killer__")
    assert status == 502, body
    # Its input closed, the agent ended: a pod's kubelet restarts its container.
    assert await first.exited(within=15) == 0

    async def unready() -> bool:
        return await agent_health(ctl) == 503

    await wait_until(unready, "/health/agent to fail while no agent answers")
    # Then agentctl waits for the restarted agent ("starting"); last_error moves on to its attempts to attach
    # again, and the history keeps each error.
    assert (await ctl.status())["state"] in ("error", "starting")
    assert any("lost the ACP connection" in e for e in errors(await ctl.history()))

    second = fifo_agents(fifo_dir)
    await second.start()

    async def resumed() -> bool:
        return (await ctl.status())["state"] == "running" and await agent_health(ctl) == 200

    await wait_until(resumed, "agentctl to resume with the restarted agent", within=30)
    assert await prompt(ctl, "after the restart") == (200, {"stopReason": "end_turn"})


async def test_what_the_agent_says_of_itself_is_bounded(spawn: Spawn) -> None:
    ctl = await started(spawn, "--bloat")
    status, start = await ctl.post("/api/v1/start", {})
    assert status == 200, start
    assert len(json.dumps(start)) < DESCRIPTION_LIMIT
    assert 0 < len(start["available_modes"]) <= MODES_MAX
    assert all(len(m["name"]) <= LABEL_MAX_CHARS for m in start["available_modes"])
    assert start["available_modes"][0]["id"] == "mode-0"  # ids are kept whole, and in the agent's order
    assert start["current_mode_id"] is None  # the agent's one is a MiB long: no mode id
    info = start["agent_info"]
    assert len(info["name"]) == LABEL_MAX_CHARS
    assert info["name"].endswith("\u2026")
    st = await ctl.status()
    assert len(json.dumps(st)) < DESCRIPTION_LIMIT
    assert st["acp"]["available_modes"] == start["available_modes"]
    status, about = await ctl.get("/api/v1/info")
    assert status == 200
    assert len(json.dumps(about)) < DESCRIPTION_LIMIT


async def test_a_session_id_past_its_bound_is_refused(spawn: Spawn) -> None:
    ctl = await spawn("--agent-command", hostile_command("--session-id", "s" * 600))
    status, body = await ctl.post("/api/v1/start", {})
    assert status == 502, body
    assert body["error"] == "agent_protocol"
    assert "an id of 600 characters" in body["message"]


async def test_update_kinds_of_the_agents_choosing_add_no_metric_series(spawn: Spawn) -> None:
    # Before: each kind was a label of agentctl_session_updates_total; 2,000 kinds of 10 KB made /metrics 40 MB.
    ctl = await started(spawn)
    assert await prompt(ctl, "__kinds 2000__") == (200, {"stopReason": "end_turn"})
    status, text = await ctl.get("/metrics")
    assert status == 200
    assert len(text) < DESCRIPTION_LIMIT
    assert 'agentctl_session_updates_total{type="unknown"} 2000.0' in text


async def test_a_flood_of_permission_requests_is_bounded(spawn: Spawn) -> None:
    # Before: each of the 200 requests waited with its 512 KiB tool call; agentctl peaked at 164 MiB.
    ctl = await started(spawn)
    assert await prompt(ctl, "__permissions 200__") == (200, {"stopReason": "end_turn"})
    status, body = await ctl.get("/api/v1/acp/permissions")
    assert status == 200
    assert len(body["pending"]) == MAX_PENDING
    st = await ctl.status()
    assert st["pending_permissions"] == MAX_PENDING
    assert "answered this one cancelled" in st["last_error"]
    assert peak(ctl) < PEAK_LIMIT, f"agentctl peaked at {peak(ctl) // MIB} MiB"


async def test_the_agents_stderr_is_kept_in_short_lines(spawn: Spawn) -> None:
    ctl = await started(spawn)
    assert await prompt(ctl, "__stderr__") == (200, {"stopReason": "end_turn"})
    lines = [json.loads(line) for line in ctl.log().splitlines()]
    stderr = [line["msg"] for line in lines if line["msg"].startswith("agent stderr: ")]
    assert len(stderr) == 30
    assert all(len(line) < 2000 and line.endswith(f"({MIB + 1} bytes)") for line in stderr)
    assert peak(ctl) < PEAK_LIMIT
