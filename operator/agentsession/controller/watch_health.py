"""Detects a deaf watch: objects that changed in the API while no watch event told the operator so.

kopf restarts silent watches itself (inactivity timeout), but a watcher that dies leaves a live, deaf operator;
the liveness probe compares what the API lists with what the watch delivered and fails when they disagree
for longer than the stall window, so the kubelet restarts the operator.

An API server that does not answer the probe's listing fails nothing: liveness is about this process, and a
restart would not bring the API back, only lose the operator's state and delay its recovery once the API returns
(kopf's watches and the work queue reconnect and retry by themselves). Whether the watch is deaf is told again
once the API answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any

from agentsession.api.manifest import Key
from agentsession.kube.errors import KubeError

# Well within a kubelet's probe timeout (the chart's is 10 s): the probe answers even when the API hangs.
LISTING_TIMEOUT_SECONDS = 4.0


class WatchStalled(Exception):
    """The watch missed changes for longer than the stall window."""


class WatchHealth:
    def __init__(self, stall_seconds: float) -> None:
        self.stall_seconds = stall_seconds
        self._seen: dict[Key, str] = {}
        self._lagging_since: dict[Key, float] = {}

    def record(self, key: Key, resource_version: str) -> None:
        self._seen[key] = resource_version

    def forget(self, key: Key) -> None:
        self._seen.pop(key, None)
        self._lagging_since.pop(key, None)

    def stalled(self, listed: Mapping[Key, str], now: float) -> list[Key]:
        """Keys whose listed version has differed from the last watched one for longer than the window."""
        for key in set(self._lagging_since) - set(listed):
            del self._lagging_since[key]
        stale = []
        for key, version in listed.items():
            if self._seen.get(key) == version:
                self._lagging_since.pop(key, None)
                continue
            since = self._lagging_since.setdefault(key, now)
            if now - since > self.stall_seconds:
                stale.append(key)
        return sorted(stale)


async def liveness(
    health: WatchHealth,
    listing: Awaitable[Mapping[Key, str]],
    now: float,
    within: float = LISTING_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """The liveness probe's answer from `listing` (what the API lists now: key → resourceVersion); raises
    WatchStalled when the watch is deaf, and only then."""
    try:
        listed = await asyncio.wait_for(listing, within)
    except (KubeError, TimeoutError) as error:
        detail = str(error) or f"no answer within {within:.0f}s"
        return {"api": f"unanswered, watch not checked: {detail}"[:500]}
    stalled = health.stalled(listed, now)
    if stalled:
        names = ", ".join(f"{ns}/{name}" for ns, name in stalled[:5])
        raise WatchStalled(
            f"the AgentSession watch is stalled: {len(stalled)} object(s) changed with no watch event "
            f"for over {health.stall_seconds:.0f}s ({names}); restart the operator"
        )
    return {"sessions": len(listed)}
