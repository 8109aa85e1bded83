"""Warning Events `EgressDenied` on a session, at most one per session and host per interval."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from agentsession.egress_proxy.directory import SessionInfo
from agentsession.kube.client import Kube
from agentsession.kube.ops import post_event
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

COMPONENT: Final = "agentsession-egress-proxy"
REASON: Final = "EgressDenied"
REMEMBERED: Final = 10_000  # (session, host) pairs whose last Event is remembered


class DenialEvents:
    def __init__(self, kube: Kube, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._interval = interval
        self._clock = clock
        self._last: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self._tasks = Supervisor("EgressDenied events", log)

    def due(self, session: SessionInfo, host: str) -> bool:
        """Whether an Event for this session and host is due now (and, if so, counts it as posted)."""
        key = (session.namespace, session.name, host)
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            return False
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > REMEMBERED:
            self._last.popitem(last=False)
        return True

    def report(self, session: SessionInfo, host: str, message: str) -> None:
        """Posts in the background: the refusal goes out to the agent without waiting for the API server."""
        if self.due(session, host):
            self._tasks.spawn(
                post_event(self._kube, session.involved(), "Warning", REASON, message, COMPONENT), host
            )

    async def close(self) -> None:
        await self._tasks.close()
