"""The streams this replica keeps open to one agent's agentctl, and the gateway's error for a failed call.

One update stream per agent per replica, whatever the number of clients: entries are fanned out by the
registry. The stream resumes with `?after=<last seq>` so a dropped connection or a restarted agentctl loses
nothing and repeats nothing; if agentctl serves another journal than the one followed (a fresh workspace,
told by its `journal_id`), its seqs are all new and the stream starts over from the first.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agentsession.agentctl_client import BAD_ANSWER, AgentctlApi, AgentctlError, ShellChannel
from agentsession.api.manifest import Manifest
from agentsession.contract.wire import StatusResponse
from agentsession.gateway import metrics
from agentsession.gateway.codec import utf8_size
from agentsession.gateway.events import ErrorCode, RequestError
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

SHELL_INPUT_BYTES = 64 * 1024  # one shell.input: a paste is sent in pieces
SHELL_QUEUE_BYTES = 1024 * 1024


# agentctl's refusals that mean the same to the gateway's client; any other is agentctl's own failure.
_REFUSALS = {404: ErrorCode.NOT_FOUND, 409: ErrorCode.CONFLICT, 422: ErrorCode.VALIDATION_ERROR}


def request_error(error: AgentctlError) -> RequestError:
    """The gateway's error for a failed agentctl call: agentctl's own words when it refused the request, else
    what failed without the gateway's internals (agentctl's address, the client library's errors); the log has
    those."""
    code = _REFUSALS.get(error.status or 0)
    if code is not None and error.code != BAD_ANSWER:
        return RequestError(code, f"agentctl: {error.detail}", upstream_status=error.status)
    log.warning("agentctl call failed: %s", error)
    if error.status is None:
        return RequestError(
            ErrorCode.UPSTREAM_ERROR, "the session's agentctl is not reachable right now; retry shortly"
        )
    return RequestError(
        ErrorCode.UPSTREAM_ERROR,
        f"the session's agentctl failed this request (HTTP {error.status}); retry, or see the gateway's log",
        upstream_status=error.status,
    )


def _backoff(failures: int, cap: float = 5.0) -> float:
    return float(min(cap, 0.1 * 2.0 ** min(failures, 8))) * random.uniform(0.5, 1.0)


@dataclass
class JournalPosition:
    """How far one agent's journal has been delivered; it outlives the streams that advance it."""

    seq: int | None = None  # None until first contact
    journal_id: str | None = None


class UpdateStream:
    """Follows agentctl's journal over `WS /api/v1/acp/stream`, delivering each seq exactly once."""

    def __init__(
        self,
        client: AgentctlApi,
        position: JournalPosition,
        on_entry: Callable[[Manifest], None],
        read_status: Callable[[], Awaitable[StatusResponse]],
        on_connected: Callable[[bool], None],
    ) -> None:
        self.client = client
        self.position = position
        self._on_entry = on_entry
        # agentctl's status, read at each (re)connection; the owner reads it so that it can order the answer
        # against its other reads of the same agentctl's status.
        self._read_status = read_status
        self._on_connected = on_connected
        self._tasks = Supervisor("agentctl update stream", log)
        self.connected = False

    def start(self) -> None:
        self._tasks.spawn(self._run(), self.client.endpoint)

    async def stop(self) -> None:
        await self._tasks.close()

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._follow()
                failures = 0
            except asyncio.CancelledError:
                self._set_connected(False)
                raise
            except Exception as exc:
                failures += 1
                log.info("agentctl update stream at %s dropped: %s", self.client.endpoint, exc)
            self._set_connected(False)
            metrics.UPSTREAM_RECONNECTS.labels("updates").inc()
            await asyncio.sleep(_backoff(failures))

    async def _follow(self) -> None:
        status = await self._read_status()
        journal_end, journal_id = status.last_seq, status.journal_id
        at = self.position
        if at.seq is None:
            # First contact starts at the journal's end: clients get the history on initialize.
            at.seq = journal_end
        elif journal_end < at.seq or (at.journal_id is not None and journal_id != at.journal_id):
            at.seq = 0
        at.journal_id = journal_id
        async with self.client.updates(at.seq) as entries:
            self._set_connected(True)
            async for entry in entries:
                if entry.seq <= at.seq:
                    continue
                at.seq = entry.seq
                # Fanned out as the JSON agentctl sent, which is what clients receive.
                self._on_entry(entry.model_dump())

    def _set_connected(self, value: bool) -> None:
        if value != self.connected:
            self.connected = value
            metrics.UPSTREAM_STREAMS.labels("updates").inc() if value else metrics.UPSTREAM_STREAMS.labels(
                "updates"
            ).dec()
            self._on_connected(value)


@dataclass(eq=False)
class _Input:
    data: str
    size: int
    owner: object  # who sent it
    written: asyncio.Future[None]


class ShellStream:
    """One shell stream per agent while any client watches the shell; output is fanned out by the caller.

    Input from every client goes through one queue, bounded in bytes, and is written one frame at a time: a shell
    that does not read (its terminal's buffer is full) leaves at most the queue in this gateway's memory, and
    input that does not fit is refused.
    """

    def __init__(
        self,
        client: AgentctlApi,
        on_frame: Callable[[Manifest], Awaitable[None] | None],
        *,
        queue_bytes: int = SHELL_QUEUE_BYTES,
    ) -> None:
        self.client = client
        self._on_frame = on_frame
        self._channel: ShellChannel | None = None
        self._tasks = Supervisor("agentctl shell stream", log)
        self._ready = asyncio.Event()
        self._queue_bytes = queue_bytes
        self._inputs: deque[_Input] = deque()
        self._writing: _Input | None = None
        self.queued_bytes = 0
        self._input_waiting = asyncio.Event()

    async def start(self, within: float = 10.0) -> None:
        self._tasks.spawn(self._run(), self.client.endpoint)
        async with asyncio.timeout(within):
            await self._ready.wait()

    async def stop(self) -> None:
        await self._tasks.close()
        self._fail_inputs("the shell stream to agentctl closed before this input was written")

    async def send_input(self, data: str, owner: object = None) -> None:
        """Queues `data` for the shell and waits until it is written to agentctl; refused when the queue is full.
        Cancelled, it leaves the queue (unless it is being written)."""
        if self._channel is None:
            raise RequestError(ErrorCode.UPSTREAM_ERROR, "the shell stream to agentctl is not connected")
        size = utf8_size(data)
        if self.queued_bytes and self.queued_bytes + size > self._queue_bytes:
            raise RequestError(
                ErrorCode.TOO_MANY_REQUESTS,
                f"the shell's input queue is full: {self.queued_bytes} bytes sent earlier wait for the shell to "
                f"read them (at most {self._queue_bytes}); send this again once the shell reads",
            )
        item = _Input(data, size, owner, asyncio.get_running_loop().create_future())
        self._inputs.append(item)
        self.queued_bytes += size
        self._input_waiting.set()
        try:
            await item.written
        except asyncio.CancelledError:
            self._discard(item)
            raise

    def release(self, owner: object) -> None:
        """Lets go of the input `owner` queued (a client that left), but for the frame being written."""
        for item in [i for i in self._inputs if i.owner is owner]:
            if self._discard(item):
                item.written.cancel()

    def _discard(self, item: _Input) -> bool:
        if item is self._writing or item not in self._inputs:
            return False
        self._inputs.remove(item)
        self.queued_bytes -= item.size
        return True

    def _fail_inputs(self, why: str) -> None:
        inputs, self._inputs = self._inputs, deque()
        self.queued_bytes = 0
        for item in inputs:
            if not item.written.done():
                item.written.set_exception(RequestError(ErrorCode.UPSTREAM_ERROR, why))

    async def _write_inputs(self, channel: ShellChannel) -> None:
        while True:
            while not self._inputs:
                self._input_waiting.clear()
                await self._input_waiting.wait()
            item = self._writing = self._inputs[0]
            failure: AgentctlError | None = None
            try:
                # One frame at a time: agentctl takes the next once it has taken this one.
                await channel.send_input(item.data)
            except AgentctlError as exc:
                failure = exc
            finally:
                # Cancelled, the frame stays queued: the stream's end fails it with the others.
                self._writing = None
            self._inputs.popleft()
            self.queued_bytes -= item.size
            if item.written.done():
                continue
            if failure is None:
                item.written.set_result(None)
            else:
                item.written.set_exception(request_error(failure))

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                async with self.client.shell() as channel:
                    self._channel = channel
                    metrics.UPSTREAM_STREAMS.labels("shell").inc()
                    self._ready.set()
                    failures = 0
                    writer = asyncio.create_task(self._write_inputs(channel))
                    try:
                        async for frame in channel.frames():
                            if frame.type in ("output", "exit"):
                                result = self._on_frame(frame.model_dump())
                                if result is not None:
                                    await result
                    finally:
                        self._channel = None
                        metrics.UPSTREAM_STREAMS.labels("shell").dec()
                        writer.cancel()
                        await asyncio.wait([writer])
                        self._fail_inputs("the shell stream to agentctl closed before this input was written")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.info("agentctl shell stream at %s dropped: %s", self.client.endpoint, exc)
            metrics.UPSTREAM_RECONNECTS.labels("shell").inc()
            await asyncio.sleep(_backoff(failures))
