"""The egress proxy's address: its Service's ClusterIP, read once at start and kept current by a watch.

Session pods reach the proxy by IP, not by name: the cluster may run no DNS the pods can use, and an address in
the pod's variables needs no resolver the agent could be tricked into asking. When the Service appears, changes
its address or goes, the operator reconciles every session and pool again: pods waiting for the proxy get made,
and pods built for an address that is gone are replaced (their pod hash names the address).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from agentsession.api.manifest import Manifest
from agentsession.controller.config import EgressProxy
from agentsession.kube.client import Kube
from agentsession.kube.informer import Informer
from agentsession.kube.resources import SERVICES

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
        self._proxy = proxy
        self._on_change = on_change
        self._address: str | None = None
        self._informer = Informer(
            kube,
            SERVICES,
            self._apply,
            [proxy.service_namespace],
            inactivity_timeout=WATCH_INACTIVITY_SECONDS,
            server_timeout=WATCH_SERVER_TIMEOUT_SECONDS,
            backoff_max=backoff_max,
        )

    @property
    def address(self) -> str | None:
        return self._address

    async def start(self) -> None:
        """Reads the Service (an API server that does not answer raises: the operator does not start blind),
        then watches it in the background."""
        await self._informer.sync()
        self._informer.start()

    async def stop(self) -> None:
        await self._informer.stop()

    def _apply(self, kind: str, service: Manifest) -> None:
        if (service.get("metadata") or {}).get("name") == self._proxy.service_name:
            self._set(None if kind == "DELETED" else cluster_ip(service))

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
