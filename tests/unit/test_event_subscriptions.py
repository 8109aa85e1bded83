"""agentctl's event hub: which entries a subscriber gets (its kinds, replay then live, each seq once), how a
stream ends, the byte budget of a subscriber's queue, and listeners that cannot break publishing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentsession.agentctl.events import QUEUED_ENTRY_COST, EventHub, SubscriberTooSlow
from agentsession.agentctl.journal import Journal, Stored

WAIT = 10.0


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[EventHub]:
    journal = Journal(tmp_path / "journal.jsonl")
    yield EventHub(journal)
    journal.close()


def _small_queues(tmp_path: Path, entries: int) -> EventHub:
    """A hub whose subscribers may queue `entries` entries like those of `_publish_empty`."""
    journal = Journal(tmp_path / "small.jsonl")
    size = len(journal.append("session_update", {}).text)
    return EventHub(journal, queue_bytes=entries * (size + QUEUED_ENTRY_COST))


async def _take(stream: AsyncIterator[Stored], count: int) -> list[Stored]:
    async with asyncio.timeout(WAIT):
        return [await anext(stream) for _ in range(count)]


async def _rest(stream: AsyncIterator[Stored]) -> list[Stored]:
    async with asyncio.timeout(WAIT):
        return [entry async for entry in stream]


def _seqs(entries: list[Stored]) -> list[int]:
    return [entry.seq for entry in entries]


async def test_a_subscriber_gets_what_is_published_after_it_subscribed(hub: EventHub) -> None:
    hub.publish("session_update", {"n": 1})
    sub = hub.subscribe()
    assert sub.start_seq == 1
    published = [hub.publish("session_update", {"n": n}) for n in (2, 3)]
    assert await _take(sub.entries(None), 2) == published


@pytest.mark.parametrize(
    ("after", "seqs"),
    [
        (0, [1, 2, 3, 4, 5]),  # everything: the journal's three, then the live two
        (2, [3, 4, 5]),
        (3, [4, 5]),  # exactly what the subscriber saw as it subscribed: live only
        (4, [5]),  # ahead of the journal at subscribe time: what it has seen is not sent again
    ],
)
async def test_replay_then_live_gives_each_seq_once_in_order(
    hub: EventHub, after: int, seqs: list[int]
) -> None:
    for n in range(3):
        hub.publish("session_update", {"n": n})
    sub = hub.subscribe()
    for n in range(3, 5):
        hub.publish("session_update", {"n": n})
    stream = sub.entries(after)
    assert _seqs(await _take(stream, len(seqs))) == seqs
    hub.close_all()
    assert await _rest(stream) == []


async def test_kinds_filter_both_the_replay_and_the_live_entries(hub: EventHub) -> None:
    hub.publish("session_update", {})
    hub.publish("permission_request", {"n": 1})
    hub.publish("session_update", {})
    sub = hub.subscribe(frozenset({"permission_request", "permission_resolved"}))
    hub.publish("session_update", {})
    hub.publish("permission_resolved", {"n": 1})
    stream = sub.entries(0)
    got = await _take(stream, 2)
    assert [(e.seq, e.kind) for e in got] == [(2, "permission_request"), (5, "permission_resolved")]
    assert sub.queued_bytes == 0  # other kinds never took a place in the queue


async def test_kinds_the_subscriber_skips_do_not_fill_its_queue(tmp_path: Path) -> None:
    hub = _small_queues(tmp_path, 2)
    sub = hub.subscribe(frozenset({"turn_end"}))
    for _ in range(5):
        hub.publish("session_update", {})
    ends = [hub.publish("turn_end", {}) for _ in range(2)]
    assert not sub.overflowed
    assert await _take(sub.entries(None), 2) == ends


async def test_a_cut_off_subscriber_is_told_the_last_seq_it_got(tmp_path: Path) -> None:
    hub = _small_queues(tmp_path, 2)
    sub = hub.subscribe()
    stream = sub.entries(0)
    assert _seqs(await _take(stream, 1)) == [1]  # from the journal
    for _ in range(3):
        hub.publish("session_update", {})
    with pytest.raises(SubscriberTooSlow, match=r"bytes behind; reconnect with \?after=1$"):
        await _rest(stream)
    hub.publish("session_update", {})
    assert sub.queued_bytes == 0


async def test_the_queue_is_bounded_in_bytes_not_entries(tmp_path: Path) -> None:
    """Entries of any size count what they hold: a few big ones overflow the budget that many small ones fit."""
    journal = Journal(tmp_path / "journal.jsonl")
    hub = EventHub(journal, queue_bytes=64 * 1024)
    small, big = hub.subscribe(), hub.subscribe()
    for _ in range(100):
        hub.publish("session_update", {"text": "x" * 100})
    assert not small.overflowed
    assert small.queued_bytes <= 64 * 1024
    small.close()
    for _ in range(3):
        hub.publish("session_update", {"text": "x" * 30_000})
    assert big.overflowed
    assert big.queued_bytes == 0  # what it had not taken is let go at once
    journal.close()


async def test_a_replay_that_falls_behind_the_live_entries_is_cut_off_too(tmp_path: Path) -> None:
    hub = _small_queues(tmp_path, 2)
    for _ in range(5):
        hub.publish("session_update", {})
    sub = hub.subscribe()
    stream = sub.entries(0)
    assert _seqs(await _take(stream, 2)) == [1, 2]
    for _ in range(3):  # while the replay is still reading the journal
        hub.publish("session_update", {})
    with pytest.raises(SubscriberTooSlow, match=r"\?after=2$"):
        await _rest(stream)


async def test_closing_a_subscription_stops_its_deliveries(hub: EventHub) -> None:
    sub = hub.subscribe()
    other = hub.subscribe()
    sub.close()
    entry = hub.publish("session_update", {})
    assert sub.queued_bytes == 0
    assert await _take(other.entries(None), 1) == [entry]


async def test_close_all_ends_every_stream_cleanly_even_a_full_one(tmp_path: Path) -> None:
    hub = _small_queues(tmp_path, 1)
    full = hub.subscribe()
    idle = hub.subscribe()
    entry = hub.publish("session_update", {})
    assert not full.overflowed
    idle_stream = idle.entries(None)
    assert await _take(idle_stream, 1) == [entry]
    hub.close_all()
    assert await _rest(idle_stream) == []
    assert await _rest(full.entries(None)) == [entry]  # what it had queued, then the end
    later = hub.publish("session_update", {})
    assert later.seq == 3
    assert idle.queued_bytes == 0


async def test_listeners_see_every_entry_and_one_that_fails_breaks_nothing(
    hub: EventHub, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[Stored] = []

    def broken(entry: Stored) -> None:
        raise RuntimeError("listener bug")

    hub.add_listener(broken)
    hub.add_listener(seen.append)
    with caplog.at_level(logging.ERROR, logger="agentsession.agentctl.events"):
        first = hub.publish("session_update", {"n": 1})
        second = hub.publish("turn_end", {})
    assert seen == [first, second]
    assert [r.exc_info is not None for r in caplog.records] == [True, True]
    assert _seqs(list(hub.journal.entries())) == [1, 2]
