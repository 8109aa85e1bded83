"""The parts of one agentctl, wired together; handlers reach them through the aiohttp app."""

from __future__ import annotations

import asyncio
import functools
import importlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from agentsession.agentctl.clock import utc_now
from agentsession.agentctl.config import Config
from agentsession.agentctl.drain import Drainer
from agentsession.agentctl.events import EventHub
from agentsession.agentctl.journal import Journal
from agentsession.agentctl.metrics import Metrics
from agentsession.agentctl.permissions import PermissionBroker
from agentsession.agentctl.session_store import SessionStore
from agentsession.agentctl.shell import ShellSession
from agentsession.agentctl.transport import AgentTransport
from agentsession.agentctl.transport_fifo import FifoTransport
from agentsession.agentctl.transport_subprocess import SubprocessTransport

if TYPE_CHECKING:
    from agentsession.agentctl.acp_bridge import AgentBridge


TURN_CUT_SHORT = "agentctl stopped during this turn (it was killed or restarted); the turn was cut short"


async def preload_acp() -> None:
    """Loads the ACP side in a thread while the event loop serves; a request that needs it before then waits on
    the import lock."""
    await asyncio.to_thread(importlib.import_module, "agentsession.agentctl.acp_bridge")


@dataclass
class StreamCounts:
    updates: int = 0
    permissions: int = 0
    shell: int = 0


@dataclass
class Services:
    config: Config
    metrics: Metrics
    journal: Journal
    hub: EventHub
    permissions: PermissionBroker
    transport: AgentTransport
    store: SessionStore
    shell: ShellSession
    started: float = field(default_factory=time.monotonic)
    started_at: str = field(default_factory=utc_now)
    clients: StreamCounts = field(default_factory=StreamCounts)
    acp_loading: asyncio.Task[None] | None = None
    _bridge: AgentBridge | None = None

    @classmethod
    def build(cls, config: Config) -> Services:
        # agentctl's alone: in a pod the agent runs as another user, and never sees this directory anyway.
        config.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        metrics = Metrics()
        journal = Journal(
            config.journal_path, on_skip=lambda reason: metrics.journal_lines_skipped.labels(reason).inc()
        )
        if journal.unfinished_turn is not None:
            # The agentctl before this one ended in the middle of a turn (killed, or its pod stopped without a
            # drain), and its agent with it: the turn is over. Said so, no reader of the history waits for its end.
            journal.append(
                "turn_end",
                {"sessionId": journal.unfinished_turn, "stopReason": "error", "error": TURN_CUT_SHORT},
            )
        hub = EventHub(journal)
        permissions = PermissionBroker(hub, config.permission_timeout, metrics)
        transport: AgentTransport
        if config.agent_fifo_dir is not None:
            transport = FifoTransport(config.agent_fifo_dir)
        else:
            transport = SubprocessTransport(config.agent_command, config.workdir, config.child_env)
        store = SessionStore(config.session_state_path)
        shell = ShellSession(config.shell_command, config.workdir, config.child_env, umask=config.shell_umask)
        return cls(config, metrics, journal, hub, permissions, transport, store, shell)

    @property
    def bridge(self) -> AgentBridge:
        """The ACP side, made on first use: loading the ACP library takes most of agentctl's start, so agentctl
        listens (and answers its probes) first and loads it in the background (`preload_acp`)."""
        if self._bridge is None:
            from agentsession.agentctl.acp_bridge import AgentBridge

            self._bridge = AgentBridge(
                self.config, self.transport, self.hub, self.permissions, self.metrics, self.store
            )
        return self._bridge

    async def acp_loaded(self, wait_s: float | None = None) -> bool:
        """Whether the ACP side is loaded, waiting up to `wait_s` (None: as long as it takes) for its thread
        (`preload_acp`). Reaching `bridge` before then would load it on the event loop and stall the server."""
        loading = self.acp_loading
        if loading is None or loading.done():
            return True
        done, _ = await asyncio.wait([loading], timeout=wait_s)
        return bool(done)

    async def agent_initialized(self, wait_s: float) -> bool:
        """Whether the agent has answered ACP initialize, waiting up to `wait_s`."""
        deadline = time.monotonic() + wait_s
        if not await self.acp_loaded(wait_s):
            return False
        return await self.bridge.wait_initialized(max(0.0, deadline - time.monotonic()))

    def agent_state(self) -> str:
        return self._bridge.phase.value if self._bridge is not None else "loading"

    @functools.cached_property
    def drainer(self) -> Drainer:
        return Drainer(lambda: self.bridge, self.hub)

    def last_activity_at(self) -> str:
        """The latest of: a journal entry (prompt, update, permission), shell input, agentctl's start.

        All are RFC 3339 UTC with milliseconds, so they order as strings.
        """
        moments = [self.started_at, self.journal.last_timestamp, self.shell.last_input_at]
        return max(m for m in moments if m is not None)

    async def close(self) -> None:
        if self._bridge is not None:
            await self._bridge.shutdown()
        await self.shell.close()
        self.hub.close_all()
        self.journal.close()


SERVICES = web.AppKey("services", Services)


def services(request: web.Request) -> Services:
    return request.app[SERVICES]
