"""An informer-like cache of AgentSessions: list, then watch with bookmarks from the list's resourceVersion.

Resilience: a watch that stays silent longer than the inactivity timeout is dropped (bookmarks keep a healthy
one talking); a dropped watch resumes from the last resourceVersion after a backoff; 410 Gone (the version is
too old) relists and reports the difference as ordinary changes, so listeners never miss a transition.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from agentsession.api.manifest import Manifest
from agentsession.gateway import metrics
from agentsession.kube.client import Kube
from agentsession.kube.errors import Gone
from agentsession.kube.resources import AGENT_SESSIONS
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

Key = tuple[str, str]
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
        self._kube = kube
        self._namespaces: list[str | None] = list(namespaces) if namespaces else [None]
        self._inactivity = inactivity_timeout
        self._server_timeout = server_timeout
        self._backoff_max = backoff_max
        self._objects: dict[Key, Manifest] = {}
        self._listeners: list[Listener] = []
        self._synced: dict[str | None, asyncio.Event] = {ns: asyncio.Event() for ns in self._namespaces}
        self._tasks = Supervisor("AgentSession watch", log)
        self._changed = asyncio.Condition()

    # --- reading ---

    def get(self, key: Key) -> Manifest | None:
        return self._objects.get(key)

    def items(self) -> list[Manifest]:
        return list(self._objects.values())

    @property
    def synced(self) -> bool:
        return all(e.is_set() for e in self._synced.values())

    async def wait_synced(self) -> None:
        for event in self._synced.values():
            await event.wait()

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    async def wait_for(
        self, key: Key, predicate: Callable[[Manifest | None], bool], within: float
    ) -> Manifest | None:
        """Waits until the cached object satisfies `predicate`; raises TimeoutError."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: predicate(self._objects.get(key)))
            return self._objects.get(key)

    # --- running ---

    def start(self) -> None:
        for ns in self._namespaces:
            self._tasks.spawn(self._run(ns), ns or "all namespaces")

    async def stop(self) -> None:
        await self._tasks.close()

    async def _run(self, namespace: str | None) -> None:
        version: str | None = None
        failures = 0
        while True:
            try:
                if version is None:
                    version = await self._list(namespace)
                    self._synced[namespace].set()
                version = await self._watch(namespace, version)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("watch resourceVersion expired; relisting", extra={"namespace": namespace})
                version = None
                continue
            except Exception as exc:
                failures += 1
                metrics.WATCH_RESTARTS.inc()
                delay = min(self._backoff_max, 0.2 * 2 ** min(failures, 8)) * random.uniform(0.5, 1.0)
                log.warning(
                    "AgentSession watch failed (%s); retrying in %.1fs", exc.__class__.__name__, delay,
                    extra={"namespace": namespace, "error": str(exc)[:300]},
                )  # fmt: skip
                await asyncio.sleep(delay)

    async def _list(self, namespace: str | None) -> str:
        listing = await self._kube.list(AGENT_SESSIONS, namespace)
        fresh = {key_of(obj): obj for obj in listing.items}
        stale = [k for k in self._objects if (namespace is None or k[0] == namespace) and k not in fresh]
        for key in stale:
            gone = self._objects.pop(key)
            self._emit("DELETED", gone, gone)
        for key, obj in fresh.items():
            old = self._objects.get(key)
            if old is None or old["metadata"].get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._objects[key] = obj
                self._emit("ADDED" if old is None else "MODIFIED", old, obj)
        await self._notify()
        return listing.resource_version

    async def _watch(self, namespace: str | None, version: str) -> str:
        events = self._kube.watch(
            AGENT_SESSIONS,
            namespace,
            resource_version=version,
            timeout_seconds=self._server_timeout,
            inactivity_timeout=self._inactivity,
        )
        async for event in events:
            obj = event.object
            version = obj.get("metadata", {}).get("resourceVersion") or version
            if event.type == "BOOKMARK":
                continue
            key = key_of(obj)
            old = self._objects.get(key)
            if event.type == "DELETED":
                self._objects.pop(key, None)
            else:
                self._objects[key] = obj
            self._emit(event.type, old, obj)
            await self._notify()
        return version

    def _emit(self, kind: str, old: Manifest | None, new: Manifest) -> None:
        metrics.WATCH_EVENTS.labels(kind).inc()
        for fn in self._listeners:
            try:
                fn(kind, old, new)
            except Exception:
                log.exception("AgentSession listener failed")

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
