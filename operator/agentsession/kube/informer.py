"""List, then watch from the list's resourceVersion, for any kind: the objects go to a callback, not to a store.

A caller that keeps only a few fields of each object (the egress proxy keeps a pod's IP and labels, not its spec)
would waste memory on a cache of whole manifests, so this keeps only each object's key. The resilience is the
gateway's session cache's: a silent watch is dropped (bookmarks keep a healthy one talking) and resumed from the
last resourceVersion after a backoff; 410 Gone relists, and whatever vanished meanwhile is reported as DELETED.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final

from agentsession.api.manifest import Key, Manifest
from agentsession.kube.client import Kube
from agentsession.kube.errors import Gone
from agentsession.kube.resources import Resource
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

# (ADDED | MODIFIED | DELETED, the object): what the owner applies to its own index.
EventHandler = Callable[[str, Manifest], None]
BACKOFF_FIRST: Final = 0.2


def key_of(obj: Manifest) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Informer:
    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        handler: EventHandler,
        namespaces: list[str] | None = None,
        *,
        label_selector: str | None = None,
        inactivity_timeout: float = 60.0,
        server_timeout: int = 300,
        backoff_max: float = 15.0,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self._kube = kube
        self._resource = resource
        self._handler = handler
        self._namespaces: list[str | None] = list(namespaces) if namespaces else [None]
        self._selector = label_selector
        self._inactivity = inactivity_timeout
        self._server_timeout = server_timeout
        self._backoff_max = backoff_max
        self._known: dict[Key, Manifest] = {}  # key -> the object's metadata only, for DELETED after a relist
        self._synced = {ns: asyncio.Event() for ns in self._namespaces}
        self._tasks = Supervisor(f"{resource.kind} watch", log)
        self._on_failure = on_failure
        # Per namespace, the resourceVersion to watch from: set by `sync`, so `start` does not list again.
        self._versions: dict[str | None, str | None] = dict.fromkeys(self._namespaces)
        self.restarts = 0

    @property
    def synced(self) -> bool:
        return all(event.is_set() for event in self._synced.values())

    async def wait_synced(self) -> None:
        for event in self._synced.values():
            await event.wait()

    async def sync(self) -> None:
        """Lists now, raising what the API server answers, for a caller that must not start blind; `start` then
        watches from these lists."""
        for namespace in self._namespaces:
            self._versions[namespace] = await self._list(namespace)
            self._synced[namespace].set()

    def start(self) -> None:
        for namespace in self._namespaces:
            self._tasks.spawn(self._run(namespace), namespace or "all namespaces")

    async def stop(self) -> None:
        await self._tasks.close()

    async def _run(self, namespace: str | None) -> None:
        version = self._versions[namespace]
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
                log.info("%s watch resourceVersion expired; relisting", self._resource.kind)
                version = None
            except Exception as error:
                failures += 1
                self.restarts += 1
                if self._on_failure is not None:
                    self._on_failure()
                delay = min(self._backoff_max, BACKOFF_FIRST * 2 ** min(failures, 8)) * random.uniform(
                    0.5, 1.0
                )
                log.warning(
                    "%s watch failed (%s); retrying in %.1fs", self._resource.kind, type(error).__name__, delay,
                    extra={"namespace": namespace, "error": str(error)[:300]},
                )  # fmt: skip
                await asyncio.sleep(delay)

    async def _list(self, namespace: str | None) -> str:
        listing = await self._kube.list(self._resource, namespace, label_selector=self._selector)
        fresh = {key_of(obj): obj for obj in listing.items}
        stale = [
            key for key in self._known if (namespace is None or key[0] == namespace) and key not in fresh
        ]
        for key in stale:
            self._deliver("DELETED", {"metadata": self._known.pop(key)})
        for obj in fresh.values():
            self._deliver("ADDED", obj)
        return listing.resource_version

    async def _watch(self, namespace: str | None, version: str) -> str:
        events = self._kube.watch(
            self._resource,
            namespace,
            resource_version=version,
            timeout_seconds=self._server_timeout,
            inactivity_timeout=self._inactivity,
            label_selector=self._selector,
        )
        async for event in events:
            version = str((event.object.get("metadata") or {}).get("resourceVersion") or version)
            if event.type != "BOOKMARK":
                self._deliver(event.type, event.object)
        return version

    def _deliver(self, kind: str, obj: Manifest) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            self._known.pop(key, None)
        else:
            meta = obj.get("metadata") or {}
            self._known[key] = {"namespace": meta.get("namespace"), "name": meta.get("name")}
        try:
            self._handler(kind, obj)
        except Exception:
            log.exception("%s handler failed on %s %s/%s", self._resource.kind, kind, *key)
