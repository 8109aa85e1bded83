"""A cache of AgentSessions kept by an informer (`kube.informer`): list, then watch with bookmarks from the list's
resourceVersion.

Resilience is the informer's: a watch that stays silent longer than the inactivity timeout is dropped (bookmarks
keep a healthy one talking); a dropped watch resumes from the last resourceVersion after a backoff; 410 Gone (the
version is too old) relists and reports the difference as ordinary changes, so listeners never miss a transition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agentsession.api.manifest import Key, Manifest
from agentsession.gateway import metrics
from agentsession.kube.client import Kube
from agentsession.kube.informer import Informer
from agentsession.kube.resources import AGENT_SESSIONS

log = logging.getLogger(__name__)

# (event type ADDED|MODIFIED|DELETED, previous object or None, current object)
Listener = Callable[[str, Manifest | None, Manifest], None]


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
        self._objects: dict[Key, Manifest] = {}
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
        return self._objects.get(key)

    def items(self) -> list[Manifest]:
        return list(self._objects.values())

    @property
    def synced(self) -> bool:
        return self._informer.synced

    async def wait_synced(self) -> None:
        await self._informer.wait_synced()

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    async def wait_for(
        self, key: Key, predicate: Callable[[Manifest | None], bool], within: float
    ) -> Manifest | None:
        """Waits until the cached object satisfies `predicate`; raises TimeoutError."""
        async with asyncio.timeout(within):
            while not predicate(self._objects.get(key)):
                await self._changed.wait()
        return self._objects.get(key)

    # --- running ---

    def start(self) -> None:
        self._informer.start()

    async def stop(self) -> None:
        await self._informer.stop()

    def _apply(self, kind: str, obj: Manifest) -> None:
        key = key_of(obj)
        old = self._objects.get(key)
        if kind == "DELETED":
            if old is None:
                return
            del self._objects[key]
            # A relist reports what vanished by its key alone: its last state is the one cached.
            current = obj if (obj.get("metadata") or {}).get("resourceVersion") else old
            self._emit(kind, old, current)
            return
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if old is not None and old["metadata"].get("resourceVersion") == version:
            return  # a relist brought what the cache holds already
        self._objects[key] = obj
        # A relist reports every object as ADDED; one the cache held has been MODIFIED.
        self._emit("MODIFIED" if kind == "ADDED" and old is not None else kind, old, obj)

    def _emit(self, kind: str, old: Manifest | None, new: Manifest) -> None:
        metrics.WATCH_EVENTS.labels(kind).inc()
        for fn in self._listeners:
            try:
                fn(kind, old, new)
            except Exception:
                log.exception("AgentSession listener failed")
        self._changed.set()
        self._changed = asyncio.Event()
