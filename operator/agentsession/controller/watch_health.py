"""Detects a deaf watch: objects that changed in the API while no watch event told the operator so.

kopf restarts silent watches itself (inactivity timeout), but a watcher that dies leaves a live, deaf operator;
the liveness probe compares what the API lists with what the watch delivered and fails when they disagree
for longer than the stall window, so the kubelet restarts the operator.
"""

from __future__ import annotations

from collections.abc import Mapping

Key = tuple[str, str]


class WatchHealth:
    def __init__(self, stall_seconds: float) -> None:
        self._stall_seconds = stall_seconds
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
            if now - since > self._stall_seconds:
                stale.append(key)
        return sorted(stale)
