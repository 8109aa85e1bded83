"""The egress proxy's address: its Service's ClusterIP, read once at start and kept current by a watch.

Session pods reach the proxy by IP, not by name: the cluster may run no DNS the pods can use, and an address in
the pod's variables needs no resolver the agent could be tricked into asking. When the Service appears, changes
its address or goes, the operator reconciles every session and pool again: pods waiting for the proxy get made,
and pods built for an address that is gone are replaced (their pod hash names the address).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final

from agentsession.api.manifest import Manifest
from agentsession.controller.config import EgressProxy
from agentsession.kube.client import Kube
from agentsession.kube.errors import Gone
from agentsession.kube.resources import SERVICES
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)
WATCH_SERVER_TIMEOUT_SECONDS: Final = 300
WATCH_INACTIVITY_SECONDS: Final = 90.0
BACKOFF_MAX_SECONDS: Final = 15.0
# A Service with no virtual IP: "None" is a headless one, "" one whose address is not allocated yet.
NO_ADDRESS: Final = frozenset({"", "None"})


def cluster_ip(service: Manifest | None) -> str | None:
    """The Service's ClusterIP, or None when it has none a pod could connect to."""
    if service is None:
        return None
    address = str((service.get("spec") or {}).get("clusterIP") or "")
    return None if address in NO_ADDRESS else address


class ProxyAddress:
    def __init__(
        self,
        kube: Kube,
        proxy: EgressProxy,
        on_change: Callable[[str | None], None],
        backoff_max: float = BACKOFF_MAX_SECONDS,
    ) -> None:
        self._kube = kube
        self._proxy = proxy
        self._on_change = on_change
        self._backoff_max = backoff_max
        self._address: str | None = None
        self._tasks = Supervisor("egress proxy Service watch", log)

    @property
    def address(self) -> str | None:
        return self._address

    async def start(self) -> None:
        """Reads the Service (an API server that does not answer raises: the operator does not start blind),
        then watches it in the background."""
        version = await self._list()
        self._tasks.spawn(self._run(version), f"{self._proxy.service_namespace}/{self._proxy.service_name}")

    async def stop(self) -> None:
        await self._tasks.close()

    async def _list(self) -> str:
        proxy = self._proxy
        listing = await self._kube.list(
            SERVICES, proxy.service_namespace, field_selector=f"metadata.name={proxy.service_name}"
        )
        self._set(cluster_ip(next(iter(listing.items), None)))
        return listing.resource_version

    async def _run(self, version: str | None) -> None:
        failures = 0
        while True:
            try:
                if version is None:
                    version = await self._list()
                version = await self._watch(version)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Gone:
                version = None
            except Exception as error:
                failures += 1
                delay = min(self._backoff_max, 0.2 * 2 ** min(failures, 8)) * random.uniform(0.5, 1.0)
                log.warning(
                    "watch of the egress proxy's Service failed (%s); retrying in %.1fs", error, delay
                )
                await asyncio.sleep(delay)
                # What changed meanwhile is read again, not assumed.
                version = None

    async def _watch(self, version: str) -> str:
        events = self._kube.watch(
            SERVICES,
            self._proxy.service_namespace,
            resource_version=version,
            timeout_seconds=WATCH_SERVER_TIMEOUT_SECONDS,
            inactivity_timeout=WATCH_INACTIVITY_SECONDS,
        )
        async for event in events:
            obj = event.object
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if (
                event.type == "BOOKMARK"
                or (obj.get("metadata") or {}).get("name") != self._proxy.service_name
            ):
                continue
            self._set(None if event.type == "DELETED" else cluster_ip(obj))
        return version

    def _set(self, address: str | None) -> None:
        if address == self._address:
            return
        before, self._address = self._address, address
        proxy = f"{self._proxy.service_namespace}/{self._proxy.service_name}"
        if address is None:
            log.warning("the egress proxy's Service %s has no address (was %s): no session pod is created "
                        "until it has one", proxy, before)  # fmt: skip
        else:
            log.info("the egress proxy's Service %s is at %s (was %s)", proxy, address, before)
        self._on_change(address)
