"""A subscriber that stops reading is cut off, loudly, while the others on the same source lose nothing: the
update stream of agentctl's event hub and the output of the workspace shell."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentsession.agentctl import shell
from agentsession.agentctl.clock import utc_now
from agentsession.agentctl.entry_limit import encode
from agentsession.agentctl.events import QUEUED_ENTRY_COST, EventHub, SubscriberTooSlow
from agentsession.agentctl.journal import Journal, Stored
from agentsession.agentctl.shell import ShellSession

WAIT = 10.0


async def _read_within(stream: AsyncIterator[Stored], into: list[Stored]) -> None:
    async with asyncio.timeout(WAIT):
        async for entry in stream:
            into.append(entry)


@pytest.fixture
def hub(tmp_path: Path) -> EventHub:
    # Queues of three entries like those the test publishes (seqs of two digits at most).
    entry = {"seq": 10, "timestamp": utc_now(), "kind": "session_update", "notification": {"n": 0}}
    return EventHub(
        Journal(tmp_path / "journal.jsonl"), queue_bytes=3 * (len(encode(entry)) + QUEUED_ENTRY_COST)
    )


async def test_slow_update_subscriber_is_cut_off_while_a_fast_one_gets_everything(hub: EventHub) -> None:
    """Publishing past a subscriber's queue ends its stream with SubscriberTooSlow naming the seq to resume
    after (not a stream that silently skips entries); resuming from there replays every entry from the journal;
    a subscriber that keeps reading gets every entry once, in order."""
    slow = hub.subscribe()
    fast = hub.subscribe()
    fast_stream: AsyncIterator[Stored] = fast.entries(None)
    published: list[Stored] = []
    received: list[Stored] = []
    for n in range(10):
        published.append(hub.publish("session_update", {"n": n}))
        async with asyncio.timeout(WAIT):
            received.append(await anext(fast_stream))
    assert received == published

    slow_seen: list[Stored] = []
    # A stream that dropped entries silently would hang here instead, and time out.
    with pytest.raises(SubscriberTooSlow) as cut_off:
        await _read_within(slow.entries(None), slow_seen)
    assert "after=0" in str(cut_off.value)
    assert slow_seen == []  # nothing half-delivered: the client resumes from the seq it was told
    assert slow.overflowed

    # The hub no longer feeds the dropped subscriber, and the fast one still gets new entries.
    later = hub.publish("session_update", {"n": 10})
    async with asyncio.timeout(WAIT):
        assert await anext(fast_stream) == later
    assert slow.queued_bytes == 0

    resumed = hub.subscribe()
    replay = resumed.entries(0)
    async with asyncio.timeout(WAIT):
        assert [await anext(replay) for _ in range(11)] == [*published, later]
    resumed.close()
    fast.close()


@pytest.fixture
def small_shell_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "QUEUE_LIMIT", 4)


async def test_slow_shell_subscriber_is_closed_while_another_keeps_getting_output(
    tmp_path: Path, small_shell_queues: None
) -> None:
    """A shell client whose queue is full is closed: its queue ends with None and gets nothing more; a client that
    keeps reading sees every line the shell prints, in order."""
    session = ShellSession(("/bin/sh",), tmp_path, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    slow = session.subscribe()
    fast = session.subscribe()
    seen: list[str] = []
    changed = asyncio.Condition()

    async def drain() -> None:
        while (text := await fast.get()) is not None:
            async with changed:
                seen.append(text)
                changed.notify_all()

    async def printed(marker: str) -> None:
        async with changed, asyncio.timeout(WAIT):
            await changed.wait_for(lambda: marker in "".join(seen).replace("\r", ""))

    reader = asyncio.create_task(drain())
    try:
        for n in range(12):
            await session.write(f"printf 'mark%s\\n' {n}\n")
            # Only the output has "mark<n>" at a line's end; the echoed command has "mark%s", and the prompt may
            # come before the output on the same line.
            await printed(f"mark{n}\n")
        assert session.status()["clients"] == 1  # the slow one is gone, the fast one is still there

        left: list[str | None] = []
        while not slow.empty():
            left.append(slow.get_nowait())
        assert left, "the slow client's queue should hold what it had plus the end marker"
        assert left[-1] is None
        assert None not in left[:-1]

        await session.write("printf 'mark%s\\n' after\n")
        await printed("markafter\n")
        assert slow.empty()  # nothing reaches a closed client

        output = "".join(seen).replace("\r", "")
        positions = [output.index(f"mark{n}\n") for n in range(12)]
        assert positions == sorted(positions)
    finally:
        reader.cancel()
        await session.close()
