"""Each agent's link to its agentctl: the update stream this replica follows while AgentctlReady is True, and the
live state that stream and agentctl's status reveal (its state, a turn running, the current mode).

One link per session per replica, whatever the number of clients. A link follows the endpoint and pod the
session's status names; a new pod (or agentctl gone) stops the old stream and starts over with a fresh live state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from agentsession.agentctl_client import AgentctlApi, AgentctlConnector, AgentctlError
from agentsession.api.manifest import Key, Manifest
from agentsession.contract.live_state import LiveState, after_entry
from agentsession.contract.wire import StatusResponse
from agentsession.gateway.events import AgentUpdate, ErrorCode, RequestError
from agentsession.gateway.sessions import Session
from agentsession.gateway.status import agent_id
from agentsession.gateway.upstream import JournalPosition, UpdateStream
from agentsession.gateway.watch_cache import SessionCache
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)


def _behind_journal(status: StatusResponse, delivered: JournalPosition) -> bool:
    """Whether agentctl wrote `status` before the last journal entry already delivered from the same journal."""
    return (
        delivered.seq is not None
        and status.journal_id == delivered.journal_id
        and status.last_seq < delivered.seq
    )


@dataclass(eq=False)
class AgentLink:
    key: Key
    live: LiveState = field(default_factory=LiveState)
    client: AgentctlApi | None = None
    stream: UpdateStream | None = None
    endpoint_key: tuple[str, str] | None = None  # (endpoint, podUID) the stream follows
    # Survives stream restarts: the journal lives on the workspace and outlives agentctl restarts.
    position: JournalPosition = field(default_factory=JournalPosition)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    last_published: tuple[dict[str, object], dict[str, object]] | None = None  # (info, cluster state)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Reads of agentctl's status, numbered as asked: the last applied one's number (see `AgentLinks._read_status`).
    status_asked: int = 0
    status_applied: int = 0

    @property
    def id(self) -> str:
        return agent_id(*self.key)

    @property
    def known_live(self) -> LiveState | None:
        """The live state while the update stream is connected; unknown otherwise."""
        return self.live if self.connected.is_set() else None


class LinkListener(Protocol):
    """What a link's owner hears from it."""

    def changed(self, link: AgentLink, observed_at: float) -> None:
        """The live state (or whether it is known) may have changed."""

    def update(self, link: AgentLink, event: AgentUpdate) -> None:
        """A journal entry for the clients that follow the agent."""

    async def stopped(self, link: AgentLink) -> None:
        """The link's streams stopped: what depends on its agentctl stops too."""


class AgentLinks:
    def __init__(
        self,
        cache: SessionCache,
        agentctl: AgentctlConnector,
        token_of: Callable[[str, str], str],
        listener: LinkListener,
        *,
        host_override: str | None = None,
        port_override: int | None = None,
    ) -> None:
        self.cache = cache
        self.agentctl = agentctl
        # Derived from the release key, as the operator derives what it writes into the pod's Secret: the gateway
        # reads no Secret.
        self._token_of = token_of
        self._listener = listener
        self._host_override = host_override
        self._port_override = port_override
        self.runtimes: dict[Key, AgentLink] = {}
        self._tasks = Supervisor("agent links", log)

    def link(self, key: Key) -> AgentLink:
        return self.runtimes.setdefault(key, AgentLink(key))

    async def close(self) -> None:
        await self._tasks.close()
        for link in self.runtimes.values():
            if link.stream:
                await link.stream.stop()

    # --- following the session ---

    def follow(self, link: AgentLink, old: Session | None, new: Session) -> None:
        """A new version of the link's session: the stream converges to the agentctl it names."""
        self._tasks.spawn(self.converge(link), f"follow {link.id}")
        if new.initialized and not (old is not None and old.initialized):
            # The operator writes AgentctlReady before it starts ACP: what agentctl said then is out of date, and
            # so is an agent's exit it reported before its ACP session was resumed (the agent restarted).
            if link.live.agent_state == "error":
                link.live = replace(link.live, agent_state=None, last_error=None)
            self._tasks.spawn(self._refresh_live(link), f"refresh {link.id}")

    def drop(self, key: Key) -> None:
        """The session was deleted: its link stops."""
        link = self.runtimes.pop(key, None)
        if link is not None:
            self._tasks.spawn(self._stop(link), f"stop {link.id}")

    def _endpoint(self, session: Session) -> str | None:
        endpoint = session.view.status.agentctlEndpoint
        if not endpoint or not session.agentctl_ready:
            return None
        if self._host_override or self._port_override:
            host = self._host_override or session.view.status.podIP
            port = self._port_override or int(endpoint.rsplit(":", 1)[1])
            return f"http://{host}:{port}"
        return endpoint

    async def converge(self, link: AgentLink) -> None:
        async with link.lock:
            session = self.cache.session(link.key)
            endpoint = self._endpoint(session) if session is not None else None
            wanted = (endpoint, str(session.view.status.podUID)) if session is not None and endpoint else None
            if wanted == link.endpoint_key:
                return
            await self._stop_streams(link)
            link.endpoint_key = None
            if wanted is None or endpoint is None or session is None:
                return
            client = link.client = self.agentctl(
                endpoint, self._token_of(session.namespace, session.view.ref.children)
            )
            link.stream = UpdateStream(
                client,
                link.position,
                on_entry=lambda entry: self.on_entry(link, entry),
                read_status=lambda: self._read_status(link, client),
                on_connected=lambda up: self._on_connected(link, up),
            )
            link.stream.start()
            link.endpoint_key = wanted

    async def ready_client(self, session: Session) -> AgentctlApi:
        """The agentctl of `session` (the version just read), or the client's error when it is not ready."""
        link = self.link(session.key)
        if session.agentctl_ready and link.client is None:
            # Readiness is announced as soon as the watch shows it; the client may ask before we converged.
            await self.converge(link)
        if not session.agentctl_ready or link.client is None:
            raise RequestError(
                ErrorCode.AGENTCTL_NOT_READY,
                f"agentctl of {session.id} is not ready yet; wait for its readiness notification",
                agentId=session.id,
            )
        return link.client

    async def _stop_streams(self, link: AgentLink) -> None:
        if link.stream:
            await link.stream.stop()
            link.stream = None
        await self._listener.stopped(link)
        link.connected.clear()
        link.live = LiveState()

    async def _stop(self, link: AgentLink) -> None:
        async with link.lock:
            await self._stop_streams(link)

    # --- what agentctl says ---

    async def _refresh_live(self, link: AgentLink) -> None:
        async with link.lock:
            client = link.client
        if client is None:
            return
        try:
            await self._read_status(link, client)
        except AgentctlError as exc:
            # The update stream reads the status again when it reconnects.
            log.info("cannot refresh the agent state of %s: %s", link.id, exc)

    async def _read_status(self, link: AgentLink, client: AgentctlApi) -> StatusResponse:
        """agentctl's status, which becomes the live state unless the answer to a later read came first.

        The update stream's read (at its connection) and a refresh (when the agent is initialized) can be in flight
        at once and answer out of order: the older answer ("starting") would otherwise stay the live state of a
        running agent, which clients would see as initializing until the stream next reconnects. Likewise a status
        from before journal entries the stream has delivered (a turn running, then its end) is older than them."""
        link.status_asked += 1
        asked = link.status_asked
        status = await client.status()
        current = self.runtimes.get(link.key) is link and link.client is client
        if current and asked > link.status_applied and not _behind_journal(status, link.position):
            link.status_applied = asked
            link.live = LiveState(
                agent_state=status.state,
                turn_running=status.acp.turn_running,
                last_error=status.last_error,
                current_mode_id=status.acp.current_mode_id or link.live.current_mode_id,
            )
            self._listener.changed(link, time.monotonic())
        return status

    def _on_connected(self, link: AgentLink, up: bool) -> None:
        if up:
            link.connected.set()
        else:
            link.connected.clear()
        self._listener.changed(link, time.monotonic())

    def on_entry(self, link: AgentLink, entry: Manifest) -> None:
        """One journal entry from the link's stream: the live state it moves, and the update clients get."""
        now = time.monotonic()
        kind = str(entry.get("kind", ""))
        notification = entry.get("notification") or {}
        live = after_entry(link.live, kind, notification)
        event = AgentUpdate(
            link.id, int(entry["seq"]), str(entry.get("timestamp", "")), kind, notification, now
        )
        # A turn's first update is preceded by its status change, and its last one by nothing after it.
        if live.turn_running and not link.live.turn_running:
            link.live = live
            self._listener.changed(link, now)
            self._listener.update(link, event)
            return
        self._listener.update(link, event)
        link.live = live
        self._listener.changed(link, now)
