"""The annotations of the namespaces the operator serves, read at most once per TTL_SECONDS each.

A namespace's annotations carry its defaults for the sessions in it (`agentsession.dev/budget`, see
`api.egress`): the operator needs them to tell whether a session's budget is spent. They change rarely, so a
reconcile reads them from here; a change shows within the TTL (a session whose budget is spent is looked at again
that often, so raising the namespace's budget lets it go on).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Final

from agentsession.kube.client import Kube
from agentsession.kube.errors import Forbidden, NotFound
from agentsession.kube.resources import NAMESPACES

log = logging.getLogger(__name__)
TTL_SECONDS: Final = 30.0


class NamespaceAnnotations:
    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._clock = clock
        self._read: dict[str, tuple[float, Mapping[str, str]]] = {}
        self._forbidden_told: set[str] = set()

    def cached(self, namespace: str) -> Mapping[str, str] | None:
        """What was read last, however old; None when the namespace was never read. No I/O: for watch handlers
        that only decide whether a reconcile is due."""
        entry = self._read.get(namespace)
        return entry[1] if entry is not None else None

    async def get(self, namespace: str) -> Mapping[str, str]:
        """The namespace's annotations, read again when the last read is older than TTL_SECONDS.

        A namespace the operator may not read (no RBAC for it) counts as one without annotations, with a warning
        once; an API server that does not answer raises, as any read of a reconcile does."""
        entry = self._read.get(namespace)
        now = self._clock()
        if entry is not None and now - entry[0] < TTL_SECONDS:
            return entry[1]
        try:
            body = await self._kube.get(NAMESPACES, None, namespace)
            annotations: Mapping[str, str] = dict((body.get("metadata") or {}).get("annotations") or {})
        except NotFound:
            annotations = {}
        except Forbidden as error:
            if namespace not in self._forbidden_told:
                self._forbidden_told.add(namespace)
                log.warning(
                    "may not read namespace %s (%s): its annotations (e.g. agentsession.dev/budget) are not "
                    "applied by the operator; grant it get on namespaces",
                    namespace,
                    error,
                )
            annotations = {}
        self._read[namespace] = (now, annotations)
        return annotations
