"""Stopping around a running turn: the turn may finish within the drain timeout, then it is cancelled through ACP.

Two callers ask for a drain: the operator before it deletes the pod (it turns the answer into an Event), and the
agent container's wrapper when the kubelet stops the pod for any other reason (it writes the stop-request file).
They share one drain. The outcome is journaled as a `drain` entry, so the history says how the turn ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agentsession.agentctl.errors import ApiError
from agentsession.agentctl.events import EventHub
from agentsession.api.constants import STOP_REQUEST_FILE, STOPPED_FILE
from agentsession.contract.wire import DrainResponse

if TYPE_CHECKING:
    from agentsession.agentctl.acp_bridge import AgentBridge

log = logging.getLogger(__name__)

# After session/cancel, how long the agent has to end the turn with stop reason `cancelled`.
CANCEL_GRACE_SECONDS = 5.0
STOP_POLL_SECONDS = 0.1


def _stop_reason(turn: asyncio.Task[str]) -> str | None:
    if not turn.done() or turn.cancelled():
        return None
    return "error" if turn.exception() is not None else turn.result()


class Drainer:
    def __init__(
        self, bridge: Callable[[], AgentBridge], hub: EventHub, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._bridge = bridge  # made on first use, once the ACP library is loaded
        self._hub = hub
        self._clock = clock
        self._running: asyncio.Task[DrainResponse] | None = None

    async def drain(self, timeout_seconds: float) -> DrainResponse:
        """Drains, or joins the drain already under way (whose timeout then applies)."""
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._drain(timeout_seconds), name="agentctl: drain")
        # Shielded: a caller that hangs up does not cut the drain short for the others.
        return await asyncio.shield(self._running)

    async def _drain(self, timeout_seconds: float) -> DrainResponse:
        bridge = self._bridge()
        bridge.stopping = True
        turn = bridge.current_turn
        started = self._clock()
        if turn is None:
            result = DrainResponse(
                outcome="idle", waited_seconds=0.0, timeout_seconds=timeout_seconds, cancelled_permissions=0
            )
        else:
            await asyncio.wait({turn}, timeout=timeout_seconds)
            if turn.done():
                result = DrainResponse(
                    outcome="finished",
                    waited_seconds=round(self._clock() - started, 3),
                    timeout_seconds=timeout_seconds,
                    cancelled_permissions=0,
                    stop_reason=_stop_reason(turn),
                )
            else:
                pending = bridge.permissions.count
                waited = round(self._clock() - started, 3)
                # bridge.cancel answers every pending permission request with "cancelled" first, as ACP asks.
                with contextlib.suppress(ApiError):
                    await bridge.cancel(None)
                await asyncio.wait({turn}, timeout=CANCEL_GRACE_SECONDS)
                result = DrainResponse(
                    outcome="cancelled",
                    waited_seconds=waited,
                    timeout_seconds=timeout_seconds,
                    cancelled_permissions=pending,
                    stop_reason=_stop_reason(turn),
                )
        self._hub.publish("drain", result.model_dump(mode="json"))
        log.info("drained", extra=result.model_dump(mode="json"))
        return result


async def serve_stop_requests(
    fifo_dir: Path, drainer: Drainer, bridge: Callable[[], AgentBridge], timeout_seconds: float
) -> None:
    """Waits for the agent container's stop request, drains, ends the agent's input, and says so in a file.

    The kubelet stops the agent container before agentctl (a sidecar); its wrapper traps SIGTERM, writes
    STOP_REQUEST_FILE and waits for STOPPED_FILE (or the agent's exit) before it stops the agent. Polling a file
    costs nothing worth an inotify dependency at this rate.
    """
    request, stopped = fifo_dir / STOP_REQUEST_FILE, fifo_dir / STOPPED_FILE
    while not request.exists():  # noqa: ASYNC110 (a file written by another container: no event to await)
        await asyncio.sleep(STOP_POLL_SECONDS)
    log.info("the pod is stopping: draining the agent")
    await drainer.drain(timeout_seconds)
    await bridge().stop()
    say_stopped(stopped)


def say_stopped(path: Path) -> None:
    """Creates the STOPPED file without following a link: the directory is the agent's to write too."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
    except OSError as exc:
        # The wrapper then waits out its own bound before it stops the agent.
        log.warning("cannot write %s: %s", path, exc)


def clear_stop_files(fifo_dir: Path) -> None:
    """A restarted agentctl in the same pod starts with no stop pending."""
    for name in (STOP_REQUEST_FILE, STOPPED_FILE):
        (fifo_dir / name).unlink(missing_ok=True)
