"""A cache of AgentSessions kept by an informer (`kube.informer`): list, then watch with bookmarks from the list's
resourceVersion.

Resilience is the informer's: a watch that stays silent longer than the inactivity timeout is dropped (bookmarks
keep a healthy one talking); a dropped watch resumes from the last resourceVersion after a backoff; 410 Gone (the
version is too old) relists and reports the difference as ordinary changes, so listeners never miss a transition.
Each version is read once, as it arrives (`sessions.Session`): listeners and readers share that reading.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agentsession.api.manifest import Key, Manifest
from agentsession.gateway import metrics
from agentsession.gateway.sessions import Session
from agentsession.kube.client import Kube
from agentsession.kube.informer import Informer
from agentsession.kube.resources import AGENT_SESSIONS

log = logging.getLogger(__name__)

# (event type ADDED|MODIFIED|DELETED, previous version or None, current version)
Listener = Callable[[str, Session | None, Session], None]


def key_of(obj: Manifest) -> Key:
    meta = obj["metadata"]
    return meta["namespace"], meta["name"]


class SessionCache:
    def __init__(
        self,
        kube: Kube,
        namespaces: list[str] | None = None,
        *,
        inactivity_timeout: float = 60.0,
        server_timeout: int = 300,
        backoff_max: float = 15.0,
    ) -> None:
        self._sessions: dict[Key, Session] = {}
        self._listeners: list[Listener] = []
        # Set and replaced on every change: what `wait_for` waits on.
        self._changed = asyncio.Event()
        self._informer = Informer(
            kube,
            AGENT_SESSIONS,
            self._apply,
            namespaces,
            inactivity_timeout=inactivity_timeout,
            server_timeout=server_timeout,
            backoff_max=backoff_max,
            on_failure=metrics.WATCH_RESTARTS.inc,
        )

    # --- reading ---

    def get(self, key: Key) -> Manifest | None:
        """The object as the API server sent it."""
        found = self._sessions.get(key)
        return found.body if found is not None else None

    def session(self, key: Key) -> Session | None:
        return self._sessions.get(key)

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def namespaces(self) -> set[str]:
        """The namespaces that have sessions."""
        return {session.namespace for session in self._sessions.values()}

    @property
    def synced(self) -> bool:
        return self._informer.synced

    async def wait_synced(self) -> None:
        await self._informer.wait_synced()

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    async def wait_for(
        self, key: Key, predicate: Callable[[Session | None], bool], within: float
    ) -> Session | None:
        """Waits until the cached session satisfies `predicate`; raises TimeoutError."""
        async with asyncio.timeout(within):
            while not predicate(self._sessions.get(key)):
                await self._changed.wait()
        return self._sessions.get(key)

    # --- running ---

    def start(self) -> None:
        self._informer.start()

    async def stop(self) -> None:
        await self._informer.stop()

    def _apply(self, kind: str, obj: Manifest) -> None:
        key = key_of(obj)
        old = self._sessions.get(key)
        if kind == "DELETED":
            if old is None:
                return
            del self._sessions[key]
            # A relist reports what vanished by its key alone: its last state is the one cached.
            last = Session.of(obj) if (obj.get("metadata") or {}).get("resourceVersion") else old
            self._emit(kind, old, last.gone())
            return
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if old is not None and old.view.resource_version == str(version or ""):
            return  # a relist brought what the cache holds already
        new = self._sessions[key] = Session.of(obj)
        # A relist reports every object as ADDED; one the cache held has been MODIFIED.
        self._emit("MODIFIED" if kind == "ADDED" and old is not None else kind, old, new)

    def _emit(self, kind: str, old: Session | None, new: Session) -> None:
        metrics.WATCH_EVENTS.labels(kind).inc()
        for fn in self._listeners:
            try:
                fn(kind, old, new)
            except Exception:
                log.exception("AgentSession listener failed")
        self._changed.set()
        self._changed = asyncio.Event()
