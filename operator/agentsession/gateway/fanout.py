"""Events to the connected clients that may see them: each client's access to a namespace is asked once, and an
event for a namespace not asked yet waits for that answer."""

from __future__ import annotations

import logging
from typing import Protocol

from agentsession.gateway.events import Event
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)


class Subscriber(Protocol):
    """A client connection as the gateway's core sees it."""

    def deliver(self, event: Event) -> None: ...

    def may_see(self, namespace: str) -> bool | None:
        """True/False if known, None if this connection has not been authorized for the namespace yet."""

    async def authorize_namespace(self, namespace: str) -> bool: ...

    def wants_updates(self, agent_id: str) -> bool: ...


class Fanout:
    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()
        self._tasks = Supervisor("event fan-out", log)

    def broadcast(self, namespace: str, event: Event, *, updates_of: str | None = None) -> None:
        """`event` to every client that may see `namespace` (and, for `updates_of`, follows that agent)."""
        for sub in list(self.subscribers):
            if updates_of is not None and not sub.wants_updates(updates_of):
                continue
            visible = sub.may_see(namespace)
            if visible is None:
                self._tasks.spawn(self._deliver_after_check(sub, namespace, event), "authorize, then deliver")
            elif visible:
                sub.deliver(event)

    async def _deliver_after_check(self, sub: Subscriber, namespace: str, event: Event) -> None:
        if await sub.authorize_namespace(namespace) and sub in self.subscribers:
            sub.deliver(event)

    async def close(self) -> None:
        await self._tasks.close()
