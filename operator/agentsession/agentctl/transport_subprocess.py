"""Subprocess transport: agentctl spawns the agent and owns its stdin/stdout (outside Kubernetes, tests)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Any

from agentsession.agentctl.transport import LINE_LIMIT, AgentPipes, AgentTransport
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

STDERR_TAIL_LINES = 20
# Each line of the agent's stderr is kept and logged cut to this: it is for a person to read, and the tail of 20
# must stay small whatever the agent prints.
STDERR_LINE_CHARS = 1000


class SubprocessTransport(AgentTransport):
    name = "subprocess"

    def __init__(self, command: tuple[str, ...], cwd: Path, env: dict[str, str]) -> None:
        self._command = command
        self._cwd = cwd
        self._env = env
        self._proc: asyncio.subprocess.Process | None = None
        self._tasks = Supervisor("subprocess transport", log)
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)

    async def attach(self) -> AgentPipes:
        await self.detach(stop_agent=True)
        self._stderr_tail.clear()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self._cwd,
                env=self._env,
                limit=LINE_LIMIT,
                # Its own process group, so stop() reaches helpers the agent spawned.
                start_new_session=True,
            )
        except OSError as exc:
            raise ConnectionError(f"cannot start agent {self._command[0]!r}: {exc.strerror or exc}") from exc
        self._proc = proc
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._stderr_task = self._tasks.spawn(
            self._drain_stderr(proc.stderr, proc.pid), f"stderr of {proc.pid}"
        )
        log.info("agent started", extra={"pid": proc.pid, "command": list(self._command)})
        return AgentPipes(proc.stdout, proc.stdin, proc.pid, {"command": list(self._command)})

    async def _drain_stderr(self, stream: asyncio.StreamReader, pid: int) -> None:
        while True:
            try:
                line = await stream.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue
            if not line:
                return
            text = line[: STDERR_LINE_CHARS * 4].decode("utf-8", "replace").rstrip()
            if len(text) > STDERR_LINE_CHARS or len(line) > STDERR_LINE_CHARS * 4:
                text = text[:STDERR_LINE_CHARS] + f"... ({len(line)} bytes)"
            self._stderr_tail.append(text)
            log.info("agent stderr: %s", text, extra={"pid": pid})

    async def agent_present(self) -> None:
        return None  # the agent is this transport's child, spawned by attach

    async def exit_reason(self) -> str:
        proc = self._proc
        if proc is None:
            return "agent is not running"
        try:
            code = await asyncio.wait_for(proc.wait(), timeout=2.0)
        except TimeoutError:
            return f"agent (pid {proc.pid}) closed its stdout but is still running"
        if self._stderr_task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=1.0)
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = " | ".join(list(self._stderr_tail)[-3:])
        return f"agent (pid {proc.pid}) {how}" + (f"; stderr: {tail}" if tail else "")

    async def detach(self, *, stop_agent: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        if proc.returncode is None and stop_agent:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=5.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            self._stderr_task = None

    def describe(self) -> dict[str, Any]:
        return {"transport": self.name, "command": list(self._command)}
