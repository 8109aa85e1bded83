"""FIFO transport: the agent runs in another container as `sh -c '"$@" <agent.in >agent.out &'` (see the pod builder's
agent wrapper).

Open order that cannot deadlock: agent.out is opened for reading with O_NONBLOCK (always succeeds, and the
read side reports EOF only after a writer came and went), then agent.in is opened for writing with O_NONBLOCK,
which fails with ENXIO until the agent's shell has opened it for reading. The kernel gives no notification
when a FIFO gains a reader, so that second step polls.

The agent is gone when either pipe says so: its stdout closing, or its stdin losing its reader. The second
matters because an exiting process may release stdout before stdin, so an attach right after an exit can
open agent.in against that dying reader; the input side then breaks, and is reported as the agent's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import stat
from asyncio.streams import FlowControlMixin
from pathlib import Path
from typing import Any

from agentsession.agentctl.transport import LINE_LIMIT, AgentPipes, AgentTransport

log = logging.getLogger(__name__)

IN_NAME = "agent.in"
OUT_NAME = "agent.out"
POLL_SECONDS = 0.05
FIFO_MODE = 0o660


def ensure_fifos(directory: Path) -> tuple[Path, Path]:
    """Create the FIFO pair if absent; the agent container's wrapper waits for them to exist.

    The agent runs as another user of agentctl's group, so the pair is group-readable and -writable whatever
    agentctl's umask."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / IN_NAME, directory / OUT_NAME)
    for path in paths:
        try:
            os.mkfifo(path, FIFO_MODE)
            os.chmod(path, FIFO_MODE)
        except FileExistsError:
            if not stat.S_ISFIFO(path.lstat().st_mode):
                raise ConnectionError(f"{path} exists and is not a FIFO") from None
    return paths


def open_fifo(path: Path, flags: int) -> int:
    """Opens one end of the pair, refusing anything but a FIFO: the directory is the agent's to write too, and a
    symbolic link put in a FIFO's place would have agentctl read or write a file of the agent's choosing."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConnectionError(f"{path} is not a FIFO (replaced since agentctl made it)")
    return fd


class FifoTransport(AgentTransport):
    name = "fifo"

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._in_path, self._out_path = ensure_fifos(directory)
        self._writer: asyncio.StreamWriter | None = None
        self._read_transport: asyncio.ReadTransport | None = None
        self._opening: asyncio.Task[tuple[int, int]] | None = None
        self.attachments = 0

    def open_early(self) -> None:
        """Opens the pair now, at agentctl's start: the agent's shell waits in its open of agent.in until then,
        so the agent starts (and loads) while agentctl still loads ACP. The next attach takes these ends."""
        if self._opening is None:
            self._opening = asyncio.create_task(self._open(), name="agentctl: open the agent's FIFOs")

    async def agent_present(self) -> None:
        opening = self._opening
        if opening is not None:
            # Waits without taking the ends (or the failure): they belong to the next attach.
            await asyncio.wait([opening])

    async def _open(self) -> tuple[int, int]:
        ensure_fifos(self._dir)
        rfd = open_fifo(self._out_path, os.O_RDONLY)
        try:
            while True:
                try:
                    return rfd, open_fifo(self._in_path, os.O_WRONLY)
                except OSError as exc:
                    if exc.errno != errno.ENXIO:
                        raise
                await asyncio.sleep(POLL_SECONDS)
        except BaseException:
            os.close(rfd)
            raise

    async def attach(self) -> AgentPipes:
        await self.detach(stop_agent=False)
        loop = asyncio.get_running_loop()
        opening, self._opening = self._opening, None
        rfd, wfd = await (opening if opening is not None else self._open())
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(rfd, "rb", buffering=0)
        )
        write_transport, write_protocol = await loop.connect_write_pipe(
            lambda: _AgentInput(reader), os.fdopen(wfd, "wb", buffering=0)
        )
        writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
        self._writer, self._read_transport = writer, read_transport
        self.attachments += 1
        log.info(
            "attached to agent through FIFOs", extra={"dir": str(self._dir), "attachments": self.attachments}
        )
        return AgentPipes(reader, writer, None, {"fifo_dir": str(self._dir)})

    async def exit_reason(self) -> str:
        return f"agent closed {self._out_path.name} (its process exited or its container restarted)"

    async def detach(self, *, stop_agent: bool) -> None:
        # The agent lives in another container; closing its stdin is the only way to ask it to stop.
        if stop_agent and self._opening is not None:
            await self._close_early(self._opening)
            self._opening = None
        writer, self._writer = self._writer, None
        read_transport, self._read_transport = self._read_transport, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        if read_transport is not None:
            read_transport.close()

    def describe(self) -> dict[str, Any]:
        return {"transport": self.name, "fifo_dir": str(self._dir)}

    @staticmethod
    async def _close_early(opening: asyncio.Task[tuple[int, int]]) -> None:
        if not opening.done():
            opening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await opening
            return
        if not opening.cancelled() and opening.exception() is None:
            for fd in opening.result():
                os.close(fd)


class _AgentInput(FlowControlMixin):
    """The write side of agent.in; when it breaks, the agent's output is ended too, so readers see one exit."""

    def __init__(self, output: asyncio.StreamReader) -> None:
        super().__init__()
        self._output = output

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._output.feed_eof()
