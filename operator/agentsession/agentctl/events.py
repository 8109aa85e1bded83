"""Fan-out of journal entries to live subscribers, with gap-free replay from the journal."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from agentsession.agentctl.journal import Entry, Journal

log = logging.getLogger(__name__)

SUBSCRIBER_QUEUE = 10_000


class SubscriberTooSlow(Exception):
    """A subscriber fell so far behind that its queue overflowed; it must reconnect with ?after=."""


class Subscription:
    def __init__(self, hub: EventHub, kinds: frozenset[str] | None) -> None:
        self._hub = hub
        self.kinds = kinds
        self.queue: asyncio.Queue[Entry | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self.overflowed = False
        # Everything up to here is in the journal already; everything after arrives through the queue.
        self.start_seq = hub.journal.last_seq

    def offer(self, entry: Entry) -> None:
        if self.kinds is not None and entry["kind"] not in self.kinds:
            return
        try:
            self.queue.put_nowait(entry)
        except asyncio.QueueFull:
            self.overflowed = True
            self._hub.unsubscribe(self)
            self.queue = asyncio.Queue(1)
            self.queue.put_nowait(None)

    async def entries(self, after: int | None) -> AsyncIterator[Entry]:
        """Replay (after, start_seq] from the journal if asked, then live entries, each seq exactly once."""
        last = after if after is not None else self.start_seq
        if after is not None and after < self.start_seq:
            for entry in await asyncio.to_thread(self._hub.journal.read, after, self.start_seq):
                if self.kinds is None or entry["kind"] in self.kinds:
                    yield entry
                last = entry["seq"]
        while True:
            item = await self.queue.get()
            if item is None:
                if self.overflowed:
                    raise SubscriberTooSlow(f"client fell behind; reconnect with ?after={last}")
                return
            if item["seq"] <= last:
                continue
            last = item["seq"]
            yield item

    def close(self) -> None:
        self._hub.unsubscribe(self)


class EventHub:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._subs: set[Subscription] = set()
        self._listeners: list[Callable[[Entry], None]] = []

    def subscribe(self, kinds: frozenset[str] | None = None) -> Subscription:
        sub = Subscription(self, kinds)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def add_listener(self, fn: Callable[[Entry], None]) -> None:
        self._listeners.append(fn)

    def publish(self, kind: str, notification: dict[str, Any]) -> Entry:
        entry = self.journal.append(kind, notification)
        for sub in list(self._subs):
            sub.offer(entry)
        for fn in self._listeners:
            try:
                fn(entry)
            except Exception:
                log.exception("event listener failed")
        return entry

    def close_all(self) -> None:
        for sub in list(self._subs):
            sub.queue.put_nowait(None) if not sub.queue.full() else None
        self._subs.clear()
