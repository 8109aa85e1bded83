"""Per-session usage: what is persisted in status.usage plus what this proxy metered since its last write.

The session's status is the one store, so totals survive a restart of the proxy and replicas add up: each
write reads the session, adds this replica's unwritten part and patches status.usage with the read
resourceVersion as a precondition; a conflict (another replica, the operator) reads again and retries. What is
not yet written stays here and counts for budgets at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Final

from agentsession.api.egress import Usage, usd, usd_text
from agentsession.api.manifest import Key
from agentsession.api.views import SessionView
from agentsession.egress_proxy import metrics
from agentsession.egress_proxy.directory import SessionInfo
from agentsession.egress_proxy.prices import Tokens
from agentsession.kube.client import Kube
from agentsession.kube.errors import Conflict, KubeError, NotFound
from agentsession.kube.resources import AGENT_SESSIONS

log = logging.getLogger(__name__)

WRITE_ATTEMPTS: Final = 8  # conflicts in a row before a write waits for the next flush
CONCURRENT_WRITES: Final = 16
IDLE_FLUSHES: Final = 60  # flushes with nothing new before a session's entry is forgotten


@dataclass
class Delta:
    input: int = 0
    output: int = 0
    cached: int = 0
    requests: int = 0
    cost: Decimal = field(default_factory=Decimal)

    def __bool__(self) -> bool:
        return bool(self.input or self.output or self.cached or self.requests or self.cost)

    def subtract(self, other: Delta) -> None:
        self.input -= other.input
        self.output -= other.output
        self.cached -= other.cached
        self.requests -= other.requests
        self.cost -= other.cost

    def copy(self) -> Delta:
        return Delta(self.input, self.output, self.cached, self.requests, self.cost)


def added(base: Usage | None, delta: Delta, now: datetime | None = None) -> Usage:
    base = base or Usage()
    return Usage(
        inputTokens=base.inputTokens + delta.input,
        outputTokens=base.outputTokens + delta.output,
        cachedTokens=base.cachedTokens + delta.cached,
        requests=base.requests + delta.requests,
        costUSD=usd_text(usd(base.costUSD) + delta.cost),
        updatedTime=now or base.updatedTime,
    )


def latest(a: Usage | None, b: Usage | None) -> Usage | None:
    """Field by field the larger: usage only grows, so the larger of two readings is the newer."""
    if a is None or b is None:
        return a or b
    return Usage(
        inputTokens=max(a.inputTokens, b.inputTokens),
        outputTokens=max(a.outputTokens, b.outputTokens),
        cachedTokens=max(a.cachedTokens, b.cachedTokens),
        requests=max(a.requests, b.requests),
        costUSD=max(a.costUSD, b.costUSD, key=usd),
        updatedTime=max((t for t in (a.updatedTime, b.updatedTime) if t), default=None),
    )


@dataclass
class _Entry:
    uid: str
    pending: Delta = field(default_factory=Delta)
    written: Usage | None = None
    idle: int = 0


class Ledger:
    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._entries: dict[Key, _Entry] = {}
        self._writes = asyncio.Semaphore(CONCURRENT_WRITES)

    def _entry(self, session: SessionInfo) -> _Entry:
        entry = self._entries.get(session.key)
        if entry is None or entry.uid != session.uid:
            entry = self._entries[session.key] = _Entry(session.uid)
        return entry

    def usage(self, session: SessionInfo) -> Usage:
        """The session's usage as budgets see it: persisted (as last seen or written) plus not yet written."""
        entry = self._entries.get(session.key)
        if entry is None or entry.uid != session.uid:
            return session.usage or Usage()
        return added(latest(session.usage, entry.written), entry.pending)

    def count_request(self, session: SessionInfo) -> None:
        """A model request is counted as it starts, so concurrent calls cannot overrun maxRequests."""
        self._entry(session).pending.requests += 1

    def add(self, session: SessionInfo, tokens: Tokens, cost: Decimal) -> None:
        pending = self._entry(session).pending
        pending.input += tokens.input
        pending.output += tokens.output
        pending.cached += tokens.cached
        pending.cost += cost

    @property
    def sessions(self) -> int:
        return len(self._entries)

    async def flush(self) -> None:
        """Writes every session's unwritten usage; what fails stays for the next flush."""
        due = []
        for key, entry in list(self._entries.items()):
            if entry.pending:
                entry.idle = 0
                due.append((key, entry))
            else:
                entry.idle += 1
                if entry.idle > IDLE_FLUSHES:
                    del self._entries[key]
        await asyncio.gather(*(self._write(key, entry) for key, entry in due))

    async def _write(self, key: Key, entry: _Entry) -> None:
        namespace, name = key
        delta = entry.pending.copy()
        async with self._writes:
            for _ in range(WRITE_ATTEMPTS):
                try:
                    session = await self._kube.get(AGENT_SESSIONS, namespace, name)
                    view = SessionView(session)
                    if view.uid != entry.uid:
                        raise NotFound(f"session {namespace}/{name} was replaced")
                    base = Usage.model_validate((session.get("status") or {}).get("usage") or {})
                    usage = added(base, delta, datetime.now(UTC).replace(microsecond=0))
                    patch = {
                        "metadata": {"resourceVersion": view.resource_version},
                        "status": {"usage": usage.model_dump(mode="json", exclude_none=True)},
                    }
                    await self._kube.patch(AGENT_SESSIONS, namespace, name, patch, status=True)
                except Conflict:
                    metrics.USAGE_WRITES.labels("conflict").inc()
                    continue
                except NotFound:
                    self._entries.pop(key, None)
                    metrics.USAGE_WRITES.labels("gone").inc()
                    return
                except (KubeError, ValueError) as error:
                    metrics.USAGE_WRITES.labels("error").inc()
                    log.warning("writing the usage of %s/%s failed: %s", namespace, name, error)
                    return
                entry.pending.subtract(delta)
                entry.written = usage
                metrics.USAGE_WRITES.labels("written").inc()
                return
            log.warning(
                "usage of %s/%s: %d conflicts in a row; retrying later", namespace, name, WRITE_ATTEMPTS
            )

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.flush()
