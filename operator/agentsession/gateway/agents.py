"""The gateway's core, a small front: one watch of AgentSessions, and for each session its link to agentctl
(`live`), its shell (`shells`) and its lifecycle requests (`lifecycle`); what changes is fanned out (`fanout`).

A session's status as clients see it is `Session.info`, computed from the cached version and the live state its
link knows, so every replica reports the same thing; it is published whenever it (or the cluster's side) changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from agentsession.agentctl_client import AgentctlConnector
from agentsession.api.manifest import Key
from agentsession.gateway.events import (
    AgentctlReady,
    AgentRemoved,
    AgentStatusChanged,
    AgentUpdate,
    ErrorCode,
    RequestError,
)
from agentsession.gateway.fanout import Fanout, Subscriber
from agentsession.gateway.lifecycle import Lifecycle
from agentsession.gateway.live import AgentLink, AgentLinks
from agentsession.gateway.sessions import Session
from agentsession.gateway.shells import Shells
from agentsession.gateway.upstream import SHELL_INPUT_BYTES, SHELL_QUEUE_BYTES
from agentsession.gateway.watch_cache import SessionCache
from agentsession.kube.client import Kube
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)


def split_id(value: str) -> Key:
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name:
        raise RequestError(
            ErrorCode.VALIDATION_ERROR, f"agent id {value!r} must be 'namespace/name'", field="agentId"
        )
    return namespace, name


class AgentRegistry:
    def __init__(
        self,
        cache: SessionCache,
        kube: Kube,
        agentctl: AgentctlConnector,
        token_of: Callable[[str, str], str],
        *,
        agentctl_host_override: str | None = None,
        agentctl_port_override: int | None = None,
        init_timeout: float = 120.0,
        shell_input_bytes: int = SHELL_INPUT_BYTES,
        shell_queue_bytes: int = SHELL_QUEUE_BYTES,
    ) -> None:
        self.cache = cache
        self.kube = kube
        self._tasks = Supervisor("agent registry", log)
        self.fanout = Fanout()
        self.links = AgentLinks(
            cache,
            agentctl,
            token_of,
            self,
            host_override=agentctl_host_override,
            port_override=agentctl_port_override,
        )
        self.shells = Shells(
            self.links, self._tasks, input_bytes=shell_input_bytes, queue_bytes=shell_queue_bytes
        )
        self.lifecycle = Lifecycle(cache, kube, self.links, init_timeout)
        cache.add_listener(self._on_session)

    async def close(self) -> None:
        await self._tasks.close()
        await self.fanout.close()
        await self.links.close()
        await self.shells.close()

    @property
    def subscribers(self) -> set[Subscriber]:
        return self.fanout.subscribers

    def forget(self, sub: Subscriber) -> None:
        self.fanout.subscribers.discard(sub)
        self.shells.forget(sub)

    # --- what clients see ---

    def session(self, key: Key) -> Session:
        """The cached session, or the client's error when there is none."""
        found = self.cache.session(key)
        if found is None:
            raise RequestError(
                ErrorCode.NOT_FOUND, f"no AgentSession {key[0]}/{key[1]}", agentId=f"{key[0]}/{key[1]}"
            )
        return found

    def info(self, session: Session) -> dict[str, Any]:
        link = self.links.runtimes.get(session.key)
        return session.info(link.known_live if link is not None else None)

    def snapshot(self, namespaces: Iterable[str]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """AgentInfo and `status.cluster_state` of each session in `namespaces`, in the order of their ids."""
        allowed = set(namespaces)
        visible = sorted((s for s in self.cache.sessions() if s.namespace in allowed), key=lambda s: s.key)
        return [self.info(s) for s in visible], {s.id: s.cluster for s in visible}

    def _publish_status(self, link: AgentLink, observed_at: float) -> None:
        session = self.cache.session(link.key)
        if session is None:
            return
        # A new phase or condition reason is news too, though the lifecycle status may stay `initializing`.
        published = (self.info(session), session.cluster)
        if published == link.last_published:
            return
        link.last_published = published
        self.fanout.broadcast(
            link.key[0], AgentStatusChanged(link.id, published[0], observed_at, published[1])
        )

    # --- watch events ---

    def _on_session(self, kind: str, old: Session | None, new: Session) -> None:
        now = time.monotonic()
        if kind == "DELETED":
            self.links.drop(new.key)
            self.fanout.broadcast(new.namespace, AgentRemoved(new.id, new.info(None), now))
            return
        link = self.links.link(new.key)
        if new.agentctl_ready and not (old is not None and old.agentctl_ready):
            self.fanout.broadcast(new.namespace, AgentctlReady(new.id, new.view.status.podUID, now))
        self.links.follow(link, old, new)
        self._publish_status(link, now)

    # --- what the links say (live.LinkListener) ---

    def changed(self, link: AgentLink, observed_at: float) -> None:
        self._publish_status(link, observed_at)

    def update(self, link: AgentLink, event: AgentUpdate) -> None:
        self.fanout.broadcast(link.key[0], event, updates_of=link.id)

    async def stopped(self, link: AgentLink) -> None:
        await self.shells.stop(link.key)
