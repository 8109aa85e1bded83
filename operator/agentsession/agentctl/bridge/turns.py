"""Prompt turns: one at a time, each a task whose result is its stop reason, journaled from the user's prompt to
its `turn_end`; and their cancel."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from acp.client.connection import ClientSideConnection
from acp.schema import PromptRequest
from pydantic import ValidationError

from agentsession.agentctl.bridge.acp_session import AcpSession
from agentsession.agentctl.bridge.acp_state import dump
from agentsession.agentctl.bridge.attachment import Attachment
from agentsession.agentctl.bridge.context import BridgeContext
from agentsession.agentctl.bridge.intake import MessageIntake
from agentsession.agentctl.bridge.phases import Phase
from agentsession.agentctl.clock import utc_now
from agentsession.agentctl.errors import ApiError, conflict

Prompt = str | list[dict[str, Any]]
# A turn runs as long as the agent works on it: it ends with its answer, a cancel, or the agent's exit.
TURN_WAIT_S = 1e9


async def _hold(turn: asyncio.Task[str]) -> None:
    """Keeps a turn until it ends: its caller may not wait for it (?wait=false). The ApiError that cuts a turn
    short is journaled as its end and raised to a caller that waits; it is no failure for the supervisor to log."""
    with contextlib.suppress(ApiError):
        await turn


def prompt_blocks(prompt: Prompt, session_id: str) -> list[Any]:
    """The prompt as ACP content blocks (text alone is one block); a 422 that says where one is invalid."""
    raw = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else prompt
    try:
        return list(PromptRequest.model_validate({"sessionId": session_id, "prompt": raw}).prompt)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(
            422, "validation_error", f"invalid prompt content block at {where}: {first['msg']}"
        ) from exc


class Turns:
    def __init__(
        self, ctx: BridgeContext, attachment: Attachment, session: AcpSession, intake: MessageIntake
    ) -> None:
        self._ctx = ctx
        self._phases, self._hub, self._metrics = ctx.phases, ctx.hub, ctx.metrics
        self._attachment = attachment
        self._session = session
        self._intake = intake
        self._turn: asyncio.Task[str] | None = None
        # Set by a drain: the pod is stopping, so no new turn may begin; a start clears it.
        self.stopping = False

    @property
    def current(self) -> asyncio.Task[str] | None:
        """The running turn's task (its result is the stop reason), or None."""
        turn = self._turn
        return turn if turn is not None and not turn.done() and self._phases.turn_running else None

    def begin(self, prompt: Prompt, session_id: str | None = None) -> asyncio.Task[str]:
        sid = self._session.require_session(session_id)
        if self.stopping:
            raise conflict(
                "the pod is stopping (the session is being suspended or deleted); prompts are refused"
            )
        if self._phases.turn_running:
            raise conflict("a prompt turn is already running; wait for it or POST /api/v1/acp/cancel")
        blocks = prompt_blocks(prompt, sid)
        conn = self._attachment.require()
        self._intake.replay = "off"
        for block in blocks:
            # Agents do not echo the user's prompt during a turn; the journal records it so history is whole.
            self._hub.publish(
                "session_update",
                {
                    "sessionId": sid,
                    "update": {"sessionUpdate": "user_message_chunk", "content": dump(block)},
                },
            )
        self._ctx.acp.turn_started_at = utc_now()
        self._phases.move(Phase.TURN)
        turn = asyncio.create_task(self._run(conn, sid, blocks), name="agentctl: turn")
        self._turn = turn
        self._ctx.tasks.spawn(_hold(turn), "turn")
        return turn

    async def _run(self, conn: ClientSideConnection, session_id: str, blocks: list[Any]) -> str:
        started = time.monotonic()
        stop_reason = "error"
        try:
            resp = await self._session.call(
                "session/prompt", conn.prompt(session_id=session_id, prompt=blocks), wait_s=TURN_WAIT_S
            )
            stop_reason = str(resp.stop_reason)
            return stop_reason
        except ApiError as exc:
            self._hub.publish(
                "turn_end", {"sessionId": session_id, "stopReason": "error", "error": exc.message}
            )
            raise
        finally:
            self._metrics.turns.labels(stop_reason).inc()
            self._metrics.turn_duration.observe(time.monotonic() - started)
            self._ctx.acp.last_stop_reason = stop_reason
            if stop_reason != "error":
                self._hub.publish("turn_end", {"sessionId": session_id, "stopReason": stop_reason})
            # Not when the agent exited or was stopped meanwhile: then the turn ended with its attachment.
            if self._phases.turn_running and self._attachment.conn is conn:
                self._phases.move(Phase.SESSION)

    async def cancel(self, session_id: str | None) -> bool:
        """Asks the agent to end the running turn; whether one still runs."""
        sid = self._session.require_session(session_id)
        conn = self._attachment.require()
        # ACP: on cancel the client answers every pending permission request of the turn with "cancelled".
        self._ctx.permissions.cancel_all("turn_cancelled")
        await self._session.call("session/cancel", conn.cancel(session_id=sid))
        return self._phases.turn_running
