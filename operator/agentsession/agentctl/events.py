"""Fan-out of journal entries to live subscribers, with gap-free replay from the journal.

Each subscriber's queue is bounded in bytes (SUBSCRIBER_QUEUE_BYTES): one that falls that far behind is dropped,
told the seq to resume after, instead of making agentctl hold whatever the agent sends while it does not read.
Replay reads the journal a batch at a time, so a subscriber that asks for everything holds one batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from agentsession.agentctl.journal import Journal, Stored

log = logging.getLogger(__name__)

SUBSCRIBER_QUEUE_BYTES = 8 * 1024 * 1024  # eight entries of the largest size, thousands of usual ones
QUEUED_ENTRY_COST = 200  # what a queued entry holds beside its text (the object, its place in the queue)


class SubscriberTooSlow(Exception):
    """A subscriber fell so far behind that its queue overflowed; it must reconnect with ?after=."""


class Subscription:
    def __init__(self, hub: EventHub, kinds: frozenset[str] | None, budget: int) -> None:
        self._hub = hub
        self.kinds = kinds
        self._budget = budget
        self._queue: deque[Stored] = deque()
        self.queued_bytes = 0
        self._changed = asyncio.Event()
        self._ended = False
        self.overflowed = False
        # Everything up to here is in the journal already; everything after arrives through the queue.
        self.start_seq = hub.journal.last_seq

    def offer(self, entry: Stored) -> None:
        if self._ended or (self.kinds is not None and entry.kind not in self.kinds):
            return
        cost = entry.size + QUEUED_ENTRY_COST
        if self.queued_bytes + cost > self._budget:
            # What it has not taken is let go now; it resumes from the journal.
            self.overflowed = True
            self._hub.unsubscribe(self)
            self.end()
            return
        self._queue.append(entry)
        self.queued_bytes += cost
        self._changed.set()

    def end(self) -> None:
        """No more entries: the stream ends after what is queued, at once if the subscriber overflowed."""
        self._ended = True
        if self.overflowed:
            self._queue.clear()
            self.queued_bytes = 0
        self._changed.set()

    async def entries(self, after: int | None) -> AsyncIterator[Stored]:
        """Replay (after, start_seq] from the journal if asked, then live entries, each seq exactly once."""
        last = after if after is not None else self.start_seq
        if after is not None and after < self.start_seq:
            async with contextlib.aclosing(self._hub.journal.stream(after, self.start_seq)) as replay:
                async for entry in replay:
                    if self.overflowed:
                        break
                    if self.kinds is None or entry.kind in self.kinds:
                        yield entry
                    last = entry.seq
        while True:
            while self._queue and not self.overflowed:
                entry = self._queue.popleft()
                self.queued_bytes -= entry.size + QUEUED_ENTRY_COST
                if entry.seq > last:
                    last = entry.seq
                    yield entry
            if self.overflowed:
                raise SubscriberTooSlow(
                    f"fell more than {self._budget} bytes behind; reconnect with ?after={last}"
                )
            if self._ended:
                return
            self._changed.clear()
            await self._changed.wait()

    def close(self) -> None:
        self._hub.unsubscribe(self)


class EventHub:
    def __init__(self, journal: Journal, queue_bytes: int = SUBSCRIBER_QUEUE_BYTES) -> None:
        self.journal = journal
        self._queue_bytes = queue_bytes
        self._subs: set[Subscription] = set()
        self._listeners: list[Callable[[Stored], None]] = []

    def subscribe(self, kinds: frozenset[str] | None = None) -> Subscription:
        sub = Subscription(self, kinds, self._queue_bytes)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def add_listener(self, fn: Callable[[Stored], None]) -> None:
        self._listeners.append(fn)

    def publish(self, kind: str, notification: dict[str, Any]) -> Stored:
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
            sub.end()
        self._subs.clear()
