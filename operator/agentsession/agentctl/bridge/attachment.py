"""One agent's attachment: the transport's pipes, the channel over them, the SDK's connection on the channel, and
how the attachment ended, which the calls it cut short wait for.

The attachment ends three ways: agentctl lets go of it (`let_go`: a stop, pipes nobody answered), the agent's
output ends (its EOF), or the SDK's receive loop fails. In the last two nobody asked: the phase moves to EXITED,
the reason is learned, and `on_lost` (the lifecycle's) decides what follows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, cast

from acp import Client, connect_to_agent
from acp.client.connection import ClientSideConnection

from agentsession.agentctl.bridge import log
from agentsession.agentctl.bridge.agent_requests import BridgeClient
from agentsession.agentctl.bridge.context import BridgeContext
from agentsession.agentctl.bridge.intake import MessageIntake
from agentsession.agentctl.bridge.phases import ATTACHED, Phase
from agentsession.agentctl.channel import AgentChannel
from agentsession.agentctl.errors import agent_unavailable, conflict

# Longer than a transport takes to learn how its agent ended (the subprocess one waits up to 3 s).
EXIT_REASON_WAIT = 5.0

# What follows an attachment lost without agentctl asking: (how it ended, whether a turn was running, how
# agentctl lost it or None when the agent exited).
OnLost = Callable[[str, bool, str | None], Awaitable[None]]


def receive_loop(conn: ClientSideConnection) -> asyncio.Task[Any] | None:
    """The SDK's task that reads the agent's messages. The SDK offers no handle on it (in acp 0.12 it is the
    connection's `_conn._recv_task`, which a unit test checks), yet its end is the one sure sign that no answer
    will come any more."""
    task = getattr(getattr(conn, "_conn", None), "_recv_task", None)
    return task if isinstance(task, asyncio.Task) else None


def settle(future: asyncio.Future[str], result: str) -> None:
    if not future.done():
        future.set_result(result)


class Attachment:
    def __init__(
        self, ctx: BridgeContext, intake: MessageIntake, client: BridgeClient, on_lost: OnLost
    ) -> None:
        self._ctx = ctx
        self._transport = ctx.transport
        self._phases = ctx.phases
        self._intake = intake
        self._client = client
        self._on_lost = on_lost
        # The connection and channel of the attachment, set in the phases of ATTACHED.
        self.conn: ClientSideConnection | None = None
        self._channel: AgentChannel | None = None
        # How the current attachment ended, for the calls it cut short.
        self.ended: asyncio.Future[str] | None = None
        self.pid: int | None = None
        self.count = 0

    async def attach(self, wait_s: float | None) -> ClientSideConnection:
        """The attached agent's connection, attaching one first if none is."""
        if self._phases.phase is Phase.EXITED:
            # Let the exit be recorded first: recorded later, it would reset the new attachment.
            await self.why_lost(self.ended)
        if self._phases.phase in ATTACHED:
            return self.require()
        self._phases.move(Phase.ATTACHING)
        try:
            pipes = await asyncio.wait_for(self._transport.attach(), wait_s)
        except BaseException as exc:
            # Cancelled too: a later start must not find the bridge still attaching (unless a stop took over).
            if self._phases.phase is Phase.ATTACHING:
                self._phases.move(Phase.FAILED)
            if isinstance(exc, TimeoutError):
                raise agent_unavailable(
                    f"the agent did not connect within {wait_s:g}s ({self._transport.name} transport); retry later"
                ) from None
            if isinstance(exc, ConnectionError | OSError):
                self._ctx.errors.note(str(exc))
                raise agent_unavailable(str(exc)) from exc
            raise
        # "running" waits for the agent's answer to initialize: an open pipe alone does not prove an agent.
        self._phases.move(Phase.CONNECTED)
        intake = self._intake
        channel = AgentChannel(pipes, intake.on_message, intake.on_refused, lambda: self._on_eof(channel))
        # The client implements the part of acp.Client an agentctl offers; the SDK answers the rest.
        conn = connect_to_agent(cast(Client, self._client), channel)
        self.conn, self._channel = conn, channel
        loop = receive_loop(conn)
        if loop is None:
            log.warning("cannot watch the ACP SDK's receive loop; a failure of it would go unnoticed")
        else:
            loop.add_done_callback(lambda task: self._on_receive_loop_end(channel, task))
        self.ended = asyncio.get_running_loop().create_future()
        self.pid = pipes.pid
        self.count += 1
        self._ctx.metrics.agent_attachments.inc()
        intake.attached()
        return conn

    def require(self) -> ClientSideConnection:
        """The attached agent's connection; a 409 that names the state when none is attached."""
        if self._phases.phase not in ATTACHED:
            last_error = self._ctx.errors.last_error
            raise conflict(
                f"the agent is not attached (state {self._phases.state}"
                + (f", last error: {last_error}" if last_error else "")
                + "); call POST /api/v1/start"
            )
        assert self.conn is not None
        return self.conn

    def let_go(self, reason: str) -> ClientSideConnection | None:
        """agentctl ends the attachment itself: the connection to close, if there was one."""
        conn, self.conn, self._channel = self.conn, None, None
        if self.ended is not None:
            settle(self.ended, reason)
        return conn

    async def why_lost(self, ended: asyncio.Future[str] | None) -> str | None:
        """How the attachment a call went out on ended; its watcher may still be learning it."""
        if ended is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(ended), EXIT_REASON_WAIT)
        except TimeoutError:
            return None

    # ----- the ends nobody asked for (called by the channel and the SDK's loop, in order) -----

    def _on_eof(self, channel: AgentChannel) -> None:
        """The agent's output ended. The channel calls this before the SDK fails the pending requests, so a turn
        the exit cut short is still in TURN here."""
        if channel is not self._channel:
            return  # agentctl ended this attachment itself
        self._lose(None)

    def _on_receive_loop_end(self, channel: AgentChannel, loop: asyncio.Task[Any]) -> None:
        """The SDK's receive loop ended. After the agent's EOF, or when agentctl closed the connection, that is
        expected; otherwise it failed, no answer can come any more, and every call would fail: the agent is
        stopped (a pod's agent, its stdin closed, exits and its container restarts) and its end is reported as
        an exit is, so that state, readiness and status say so."""
        if channel is not self._channel or channel.eof.is_set():
            return
        failure = None if loop.cancelled() else loop.exception()
        log.error("the ACP connection's receive loop ended without the agent's EOF", exc_info=failure)
        self._lose(
            "agentctl stopped reading the agent's messages after an internal error (see agentctl's log)"
        )

    def _lose(self, lost: str | None) -> None:
        """The attachment is over without agentctl asking: the agent exited (`lost` None), or agentctl lost its
        connection to it (`lost` says how)."""
        conn, ended = self.require(), self.ended
        assert ended is not None
        turn_was_running = self._phases.turn_running
        self.conn = self._channel = None
        self._phases.move(Phase.EXITED)
        self._ctx.tasks.spawn(self._learn_end(conn, ended, turn_was_running, lost), "exit")

    async def _learn_end(
        self, conn: ClientSideConnection, ended: asyncio.Future[str], turn_was_running: bool, lost: str | None
    ) -> None:
        # A loss is said at once: the calls it cut short wait for the reason.
        reason = (
            await self._transport.exit_reason() if lost is None else f"{lost}; agentctl stopped the agent"
        )
        settle(ended, reason)
        await self._on_lost(reason, turn_was_running, lost)
        with contextlib.suppress(Exception):
            await conn.close()
