"""The orchestration of an agent's life: start (attach, initialize, open or resume the session, the first prompt),
stop, preparing a pod's agent before anyone asks, and what follows an exit nobody asked for.

Only one of start, stop and a preparing attempt acts at a time (one lock). Preparing and attaching again after
an exit are one retry loop (`_keep_trying`): an attempt, and after a failure the pipes nobody answered let go
and a pause.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from acp import PROTOCOL_VERSION

from agentsession.agentctl.bridge import log
from agentsession.agentctl.bridge.acp_session import AcpSession
from agentsession.agentctl.bridge.attachment import Attachment
from agentsession.agentctl.bridge.context import BridgeContext
from agentsession.agentctl.bridge.phases import ACP_INITIALIZED, IN_SESSION, Phase
from agentsession.agentctl.bridge.turns import Turns
from agentsession.agentctl.errors import ApiError
from agentsession.contract.wire import StartRequest, StartResponse

# Errors that mean no answer came from the agent, as opposed to an answer that says no.
AGENT_GONE = frozenset({"agent_exited", "agent_timeout", "agent_unavailable"})
REATTACH_DELAY = 0.5
# After agentctl lost its connection and closed the agent's input, the time an agent that ends at the end of its
# input has to read it, before the FIFOs are opened again: opened at once, the input would not end for it.
LOST_REATTACH_DELAY = 2.0
# `start`'s attach wait when its caller names none: the configured attach timeout.
CONFIGURED_WAIT = -1


class Lifecycle:
    def __init__(self, ctx: BridgeContext, attachment: Attachment, session: AcpSession, turns: Turns) -> None:
        self._ctx = ctx
        self._transport, self._phases, self._acp = ctx.transport, ctx.phases, ctx.acp
        self._attachment = attachment
        self._session = session
        self._turns = turns
        self._lock = asyncio.Lock()
        # What the operator asked for last, start or stop: a fifo agent that exits is waited for only after a start.
        self._resume_wanted = False
        self._reattach: asyncio.Task[None] | None = None
        self._preparing: asyncio.Task[None] | None = None

    # ----- the operator's entry points -----

    async def start(self, req: StartRequest, attach_wait_s: float | None = CONFIGURED_WAIT) -> StartResponse:
        attach_timeout = (
            self._ctx.config.attach_timeout if attach_wait_s == CONFIGURED_WAIT else attach_wait_s
        )
        acp, record, session = self._acp, self._ctx.store.record, self._session
        async with self._lock:
            self._resume_wanted = True
            self._turns.stopping = False
            await self._attachment.attach(attach_timeout)
            if self._phases.phase not in ACP_INITIALIZED:
                await session.initialize()
            wanted = req.session_id or record.session_id
            resumed = prompt_sent = False
            extra: dict[str, Any] = {}
            if self._phases.phase in IN_SESSION and wanted in (None, acp.session_id):
                pass  # idempotent repeat
            elif wanted is not None:
                cwd = req.cwd or record.cwd
                if acp.load_session:
                    try:
                        await session.load_session(wanted, cwd)
                        resumed = True
                    except ApiError as exc:
                        if exc.code in AGENT_GONE:
                            raise
                        # The agent answered that it cannot load the session (its store was outside the
                        # workspace, or it never wrote it: gemini-cli sometimes says "No previous sessions
                        # found"). The journal still has the history; continue in a new ACP session without
                        # re-sending the prompt.
                        extra["load_error"] = exc.message
                        await session.new_session(cwd)
                else:
                    await session.new_session(cwd)
                    extra["load_error"] = "the agent does not support session/load; started a new session"
            else:
                await session.new_session(req.cwd)
                if req.prompt:
                    self._turns.begin(req.prompt)
                    prompt_sent = True
                    session.remember(prompt_sent=True)
            mode = req.mode_id or (record.mode_id if resumed else None)
            if mode and mode != acp.current_mode_id:
                await session.set_mode(mode, None)
            assert acp.session_id is not None
            return StartResponse.model_validate(
                {
                    "success": True,
                    "session_id": acp.session_id,
                    "resumed": resumed,
                    "prompt_sent": prompt_sent,
                    "current_mode_id": acp.current_mode_id,
                    "available_modes": acp.available_modes,
                    "agent_info": acp.agent_info,
                    "protocol_version": acp.protocol_version or PROTOCOL_VERSION,
                    **extra,
                }
            )

    async def stop(self) -> None:
        if self._preparing is not None:
            self._preparing.cancel()
        async with self._lock:
            self._resume_wanted = False
            if self._reattach is not None:
                self._reattach.cancel()
            conn = self._attachment.let_go("agentctl stopped the agent")
            self._phases.move(Phase.STOPPING)
            try:
                self._ctx.permissions.cancel_all("agent_stopped")
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                await self._transport.detach(stop_agent=True)
            finally:
                # However the transport fared, nothing is attached now; a stuck STOPPING would refuse every start.
                self._reset()
                self._phases.move(Phase.STOPPED)

    # ----- a pod's agent, before anyone asks -----

    def prepare_in_background(self) -> None:
        if self._preparing is None or self._preparing.done():
            self._preparing = self._ctx.tasks.spawn(self.prepare(), "prepare")

    async def prepare(self) -> None:
        """In a pod the agent runs before anyone asks for a session: attach and initialize it now, so a start only
        opens the session, and the agent container's readiness (`GET /health/agent`) says when the agent answers.
        A start or a stop takes over; a failure is logged and tried again, as a start would."""

        async def attempt() -> None:
            await self._transport.agent_present()
            async with self._lock:
                if not self._preparable():
                    return
                await self._attachment.attach(self._ctx.config.attach_timeout)
                await self._session.initialize()
                log.info("the agent answered ACP initialize", extra={"agent": self._acp.agent_info})

        await self._keep_trying(
            self._preparable, attempt, "the agent did not answer ACP initialize: %s; trying again"
        )

    def _preparable(self) -> bool:
        return not self._resume_wanted and self._phases.phase in (Phase.STOPPED, Phase.FAILED)

    # ----- after an exit nobody asked for -----

    async def after_exit(self, reason: str, turn_was_running: bool, lost: str | None) -> None:
        """The attachment ended without agentctl asking: the agent exited (`lost` None) or agentctl lost its
        connection to it (`lost` says how); `reason` is how it ended."""
        self._ctx.permissions.cancel_all("agent_exited")
        if self._phases.phase is not Phase.EXITED:
            return  # a stop took over while the reason was learned, and says how the attachment ended
        self._reset()
        self._phases.move(Phase.FAILED)
        if lost is None:
            what = "agent exited during a turn" if turn_was_running else "agent exited"
            self._ctx.errors.record(f"{what}: {reason}", "agent_exited")
            self._attach_again()
        else:
            what = "during a turn: " if turn_was_running else ""
            self._ctx.errors.record(
                f"agentctl lost the ACP connection to the agent {what}{reason}", "agent_lost"
            )
            # A start meanwhile attaches an agent of its own (the transport stops this one first).
            await self._transport.detach(stop_agent=True)
            self._ctx.tasks.spawn(self._attach_again_after(LOST_REATTACH_DELAY), "attach again")

    def _attach_again(self) -> None:
        """After the agent's end: a pod's agent is attached again as soon as its container has restarted."""
        if self._transport.name != "fifo" or self._phases.phase is not Phase.FAILED:
            return
        # An exit seen while a re-attach is already trying (its pipes broke) must not start a second one.
        if not self._resume_wanted:
            self.prepare_in_background()
        elif self._reattach is None or self._reattach.done():
            self._reattach = self._ctx.tasks.spawn(self._reattach_loop(), "reattach")

    async def _attach_again_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._attach_again()

    async def _reattach_loop(self) -> None:
        """A restarted agent container reopens the FIFOs; resume its session there without re-prompting."""

        async def attempt() -> None:
            await self.start(StartRequest(), attach_wait_s=None)
            log.info("re-attached to the restarted agent", extra={"session_id": self._acp.session_id})

        await self._keep_trying(lambda: self._resume_wanted, attempt, "re-attach failed: %s")

    # ----- the retry loop and its clean-up -----

    async def _keep_trying(
        self, wanted: Callable[[], bool], attempt: Callable[[], Awaitable[None]], failed: str
    ) -> None:
        """Runs `attempt` while `wanted()` holds, until one does not fail: a failure is logged (`failed` takes
        its message), the pipes nobody answered are let go, and the next attempt waits REATTACH_DELAY."""
        while wanted():
            try:
                await attempt()
                return
            except ApiError as exc:
                log.warning(failed, exc.message)
            await self._abandon_unanswered()
            await asyncio.sleep(REATTACH_DELAY)

    async def _abandon_unanswered(self) -> None:
        """Let go of pipes whose reader never answered initialize: the next attempt opens them afresh and
        waits for an agent that is really there, instead of queueing more requests to one that is not."""
        async with self._lock:
            if self._phases.phase not in (Phase.CONNECTED, Phase.UNANSWERED):
                return
            conn = self._attachment.require()
            self._attachment.let_go("agentctl gave up on an agent that did not answer initialize")
            self._phases.move(Phase.FAILED)
            with contextlib.suppress(Exception):
                await conn.close()
            await self._transport.detach(stop_agent=False)

    def _reset(self) -> None:
        """Nothing is attached any more: what the agent said of itself and its session is forgotten."""
        self._acp.clear()
        self._attachment.pid = None
