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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agentsession.agentctl_api import StatusResponse
from agentsession.agentctl_client import BAD_ANSWER, AgentctlApi, AgentctlError, ShellChannel
from agentsession.api.manifest import Manifest
from agentsession.gateway import metrics
from agentsession.gateway.events import ErrorCode, RequestError
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)


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


class ShellStream:
    """One shell stream per agent while any client watches the shell; output is fanned out by the caller."""

    def __init__(self, client: AgentctlApi, on_frame: Callable[[Manifest], Awaitable[None] | None]) -> None:
        self.client = client
        self._on_frame = on_frame
        self._channel: ShellChannel | None = None
        self._tasks = Supervisor("agentctl shell stream", log)
        self._ready = asyncio.Event()

    async def start(self, within: float = 10.0) -> None:
        self._tasks.spawn(self._run(), self.client.endpoint)
        async with asyncio.timeout(within):
            await self._ready.wait()

    async def stop(self) -> None:
        await self._tasks.close()

    async def send_input(self, data: str) -> None:
        if self._channel is None:
            raise RequestError(ErrorCode.UPSTREAM_ERROR, "the shell stream to agentctl is not connected")
        await self._channel.send_input(data)

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                async with self.client.shell() as channel:
                    self._channel = channel
                    metrics.UPSTREAM_STREAMS.labels("shell").inc()
                    self._ready.set()
                    failures = 0
                    try:
                        async for frame in channel.frames():
                            if frame.type in ("output", "exit"):
                                result = self._on_frame(frame.model_dump())
                                if result is not None:
                                    await result
                    finally:
                        self._channel = None
                        metrics.UPSTREAM_STREAMS.labels("shell").dec()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.info("agentctl shell stream at %s dropped: %s", self.client.endpoint, exc)
            metrics.UPSTREAM_RECONNECTS.labels("shell").inc()
            await asyncio.sleep(_backoff(failures))
