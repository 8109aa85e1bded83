"""The gateway's memory, bounded whatever one client sends or one agent journals, piece by piece on the in-memory
API server and agentctl: a history sent in pages (every entry once, in order, then the live updates, with a client
that reads slowly, leaves, or asks again), byte bounds on a client's queue and on its requests in flight, and one
bounded queue of input per shell. tests/hostile/test_gateway_bytes.py measures the same on the real process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agentsession.contract.wire import JournalEntry
from agentsession.gateway import commands as c
from agentsession.gateway.auth import DEV_IDENTITY
from agentsession.gateway.codec import Codec
from agentsession.gateway.commands import Command
from agentsession.gateway.connection import Connection
from agentsession.gateway.events import AgentStatusChanged, ErrorCode, Failure, RequestError
from agentsession.gateway.lifecycle_dialect import LifecycleCodec
from agentsession.gateway.service import Service
from agentsession.gateway.task_dialect import TaskCodec
from agentsession.gateway.upstream import ShellStream
from agentsession.testing.fake_agentctl import FakeAgentctl
from tests.unit.test_agent_registry import AGENT, KEY, Gateway, until
from tests.unit.test_gateway_hostile_input import Socket

PAGE = 7  # entries per history page: small, so a short journal takes many
WAIT = 30.0


def text_update(n: int, size: int = 0) -> dict[str, Any]:
    content = {"type": "text", "text": f"{n:08d}" + "x" * size}
    return {"sessionId": "acp-1", "update": {"sessionUpdate": "agent_message_chunk", "content": content}}


def journal(fake: FakeAgentctl, count: int) -> None:
    """`count` entries journaled before any client follows the agent (built directly: a long journal is quick)."""
    start = fake.last_seq
    fake.journal.extend(
        JournalEntry.model_construct(
            seq=start + i,
            timestamp="2026-01-01T12:00:00.000Z",
            kind="session_update",
            notification=text_update(i),
        )
        for i in range(1, count + 1)
    )


async def ready(gateway: Gateway, entries: int = 0) -> FakeAgentctl:
    """The session Ready with `entries` in its journal, its update stream open; history pages of PAGE entries."""
    fake = gateway.agentctl()
    fake.history_page_entries = PAGE
    journal(fake, entries)
    await gateway.session(ready=True)
    await until("connected", gateway.connected)
    return fake


def client(gateway: Gateway, codec: Codec | None = None, **bounds: int) -> tuple[Connection, Socket]:
    ws = Socket()
    conn = Connection(ws, codec or TaskCodec(), DEV_IDENTITY, None, **bounds)  # type: ignore[arg-type]
    conn.start()
    gateway.registry.subscribers.add(conn)
    return conn, ws


def frames(ws: Socket) -> list[dict[str, Any]]:
    return [json.loads(text) for text in ws.sent]


def seqs(ws: Socket, *, since: int = 0) -> list[int]:
    """In the task dialect: the seqs the client received, history and live alike, in the order it got them."""
    out = []
    for frame in frames(ws)[since:]:
        payload = frame["payload"]
        if frame["action"] in ("task.start", "task.history"):
            out += [entry["seq"] for entry in payload.get("updates", [])]
        elif frame["action"] == "session.update":
            out.append(payload["seq"])
    return out


def history_frames(ws: Socket) -> list[dict[str, Any]]:
    return [f for f in frames(ws) if f.get("action") in ("task.start", "task.history")]


def start(request: str = "start-1") -> Command:
    return Command(c.INITIALIZE, AGENT, {}, envelope_id=request)


async def initialize(gateway: Gateway, conn: Connection, command: Command | None = None) -> None:
    async with asyncio.timeout(WAIT):
        await Service(gateway.registry).handle(conn, command or start())


def journaling_while_read(
    fake: FakeAgentctl, gateway: Gateway, call: str, entries: Callable[[int], int], size: int = 0
) -> list[int]:
    """Each call of agentctl's `call` journals `entries(n)` more entries first (n counts the calls) and answers
    once the gateway has fanned them out: the agent keeps talking while a client reads its history."""
    calls: list[int] = []
    answer: Callable[..., Awaitable[Any]] = getattr(fake, call)

    async def journaling(*args: Any) -> Any:
        calls.append(len(calls))
        count = entries(calls[-1])
        for _ in range(count):
            fake.append("session_update", text_update(fake.last_seq + 1, size))
        last = fake.last_seq
        if count:
            await until("the new entries fanned out", lambda: last in gateway.client.updates())
        return await answer(*args)

    setattr(fake, call, journaling)
    return calls


async def test_a_history_comes_in_pages_then_the_live_updates_with_no_gap_and_no_repeat(
    gateway: Gateway,
) -> None:
    fake = await ready(gateway, 3 * PAGE + 2)
    # The agent journals while each page is read, and again after the last one.
    journaling_while_read(fake, gateway, "history", lambda n: 1)
    journaling_while_read(fake, gateway, "permissions", lambda n: 2)
    conn, ws = client(gateway)
    await initialize(gateway, conn)
    fake.append("session_update", text_update(fake.last_seq + 1))  # and after the client went live
    await until("every entry delivered", lambda: fake.last_seq in seqs(ws))
    assert seqs(ws) == list(range(1, fake.last_seq + 1))
    pages = history_frames(ws)
    assert len(pages) > 3
    assert [p["type"] for p in pages] == ["response"] + ["notification"] * (len(pages) - 1)
    assert {p["payload"].get("request_id") for p in pages[1:]} == {"start-1"}
    assert [len(p["payload"]["updates"]) for p in pages[:-1]] == [PAGE] * (len(pages) - 1)
    # Each page's `next` is the seq the following one starts after; the last one's is null.
    cursors = [p["payload"]["next"] for p in pages]
    assert cursors[:-1] == [p["payload"]["updates"][-1]["seq"] for p in pages[:-1]]
    assert cursors[-1] is None
    await conn.close()


async def test_more_than_a_hundred_thousand_entries_all_arrive(gateway: Gateway) -> None:
    """agentctl's page used to stop at 100,000 entries, and the gateway went on from the journal's end."""
    fake = await ready(gateway, 100_500)
    fake.history_page_entries = 1000
    conn, ws = client(gateway)
    await initialize(gateway, conn)
    await until("the last page", lambda: bool(ws.sent) and history_frames(ws)[-1]["payload"]["next"] is None)
    assert seqs(ws) == list(range(1, 100_501))
    assert len(history_frames(ws)) == 101
    await conn.close()


async def test_the_next_page_is_read_only_once_the_client_took_the_last_one(gateway: Gateway) -> None:
    fake = await ready(gateway, 3 * PAGE)
    conn, ws = client(gateway)
    ws.paused = True
    initializing = asyncio.create_task(Service(gateway.registry).handle(conn, start()))
    await until("the first page on its way", lambda: len(ws.sent) == 1)
    for _ in range(100):  # the gateway has every chance to read on
        await asyncio.sleep(0)
    assert [call for call, _ in fake.calls].count("history") == 1
    ws.reads_again()
    async with asyncio.timeout(WAIT):
        await initializing
    assert seqs(ws) == list(range(1, 3 * PAGE + 1))
    assert [call for call, _ in fake.calls].count("history") == 3
    await conn.close()


async def test_a_client_that_leaves_mid_history_stops_the_reading(gateway: Gateway) -> None:
    fake = await ready(gateway, 3 * PAGE)
    conn, ws = client(gateway)
    ws.paused = True
    initializing = asyncio.create_task(Service(gateway.registry).handle(conn, start()))
    await until("the first page on its way", lambda: len(ws.sent) == 1)
    ws.reads_again()  # the close handshake needs the socket
    ws.paused = True
    await conn.close()
    async with asyncio.timeout(WAIT):
        await initializing
    assert [call for call, _ in fake.calls].count("history") <= 2
    assert not conn.wants_updates(AGENT)


async def test_updates_that_outgrow_what_is_held_are_read_from_the_journal(gateway: Gateway) -> None:
    """While the last page is on its way the agent journals more than the client's hold: the gateway says more
    follows, and reads it from the journal."""
    fake = await ready(gateway, PAGE)
    # 64 KiB of queue holds 32 KiB of updates; the agent journals 80 KiB while the last page is read.
    reads = journaling_while_read(fake, gateway, "permissions", lambda n: 10 if n == 0 else 0, size=8 * 1024)
    conn, ws = client(gateway, queue_bytes=64 * 1024)
    await initialize(gateway, conn)
    await until("every entry delivered", lambda: fake.last_seq in seqs(ws))
    assert seqs(ws) == list(range(1, PAGE + 11))
    pages = history_frames(ws)
    assert pages[0]["payload"]["next"] == PAGE, "the first page said nothing more followed"
    assert len(reads) == 2
    await conn.close()


async def test_asking_again_while_live_holds_the_live_updates_until_the_new_history_ends(
    gateway: Gateway,
) -> None:
    fake = await ready(gateway, 2 * PAGE)
    conn, ws = client(gateway)
    await initialize(gateway, conn, start("first"))
    fake.append("session_update", text_update(fake.last_seq + 1))
    await until("live", lambda: fake.last_seq in seqs(ws))
    mark = len(ws.sent)
    journaling_while_read(fake, gateway, "history", lambda n: 1)
    await initialize(gateway, conn, start("second"))
    fake.append("session_update", text_update(fake.last_seq + 1))
    await until("live again", lambda: fake.last_seq in seqs(ws, since=mark))
    again = frames(ws)[mark:]
    kinds = [f["action"] for f in again]
    last_page = max(i for i, kind in enumerate(kinds) if kind in ("task.start", "task.history"))
    assert "session.update" not in kinds[:last_page], "a live update came in the middle of the history"
    assert seqs(ws, since=mark) == list(range(1, fake.last_seq + 1))
    await conn.close()


async def test_the_lifecycle_dialect_pages_with_agent_history_frames(gateway: Gateway) -> None:
    fake = await ready(gateway, 2 * PAGE + 1)
    conn, ws = client(gateway, LifecycleCodec())
    await initialize(gateway, conn, Command(c.INITIALIZE, AGENT, {}, "r1"))
    sent = frames(ws)
    assert [f["type"] for f in sent] == ["agent_initialized", "agent_history", "agent_history"]
    assert [f["payload"]["next"] for f in sent] == [PAGE, 2 * PAGE, None]
    assert {f["payload"]["requestId"] for f in sent} == {"r1"}
    assert {f["payload"]["agentId"] for f in sent} == {AGENT}
    texts = [u["notification"]["update"]["content"]["text"] for f in sent for u in f["payload"]["updates"]]
    assert texts == [f"{n:08d}" for n in range(1, fake.last_seq + 1)]
    await conn.close()


async def test_a_journal_replaced_mid_history_is_an_error_and_the_client_does_not_follow(
    gateway: Gateway,
) -> None:
    fake = await ready(gateway, 2 * PAGE)
    answer = fake.history

    async def replaced_after_the_first_page(after: int = 0) -> Any:
        if after:
            fake.journal_id = "another"
        return await answer(after)

    fake.history = replaced_after_the_first_page  # type: ignore[method-assign]
    conn, ws = client(gateway)
    await initialize(gateway, conn)
    await until("the error", lambda: bool(ws.sent) and frames(ws)[-1]["type"] == "error")
    last = frames(ws)[-1]
    assert (last["type"], last["id"], last["payload"]["code"]) == ("error", "start-1", "UPSTREAM_ERROR")
    assert "initialize again" in last["payload"]["message"]
    assert not conn.wants_updates(AGENT)
    await conn.close()


async def test_an_agentctl_whose_history_does_not_go_on_is_an_error_not_a_loop(gateway: Gateway) -> None:
    fake = await ready(gateway, 2 * PAGE)
    answer = fake.history

    async def the_same_page_again(after: int = 0) -> Any:
        page = await answer(0)
        return page.model_copy(update={"next": after})

    fake.history = the_same_page_again  # type: ignore[method-assign]
    conn, ws = client(gateway)
    await initialize(gateway, conn)
    await until("the error", lambda: [f["type"] for f in frames(ws)] == ["error"])
    assert "did not go on after 0" in frames(ws)[0]["payload"]["message"]
    assert [call for call, _ in fake.calls].count("history") == 1
    await conn.close()


# ---------------------------------------------------------------- a client's bytes


async def test_a_client_whose_queue_outgrows_its_bytes_is_dropped_as_slow() -> None:
    ws = Socket()
    ws.paused = True
    conn = Connection(ws, LifecycleCodec(), DEV_IDENTITY, None, queue_bytes=256 * 1024)  # type: ignore[arg-type]
    conn.start()
    big = "x" * 100 * 1024
    for n in range(4):  # far fewer than its 1024 messages
        conn.deliver(AgentStatusChanged("ns/a", {"status": "ready", "n": n, "pad": big}))
    assert conn.dropped_slow
    ws.reads_again()
    await until("closed as slow", lambda: ws.closed_with is not None)
    assert json.loads(ws.sent[-1])["payload"]["code"] == "slow_consumer"
    await conn.close()


async def test_a_message_bigger_than_the_queue_s_bytes_still_goes_to_a_client_that_reads() -> None:
    ws = Socket()
    conn = Connection(ws, LifecycleCodec(), DEV_IDENTITY, None, queue_bytes=1024)  # type: ignore[arg-type]
    conn.start()
    conn.deliver(AgentStatusChanged("ns/a", {"status": "ready", "pad": "x" * 10_000}))
    await until("sent", lambda: bool(ws.sent))
    assert not conn.dropped_slow
    await conn.close()


async def test_requests_beyond_the_bytes_in_flight_are_refused_and_their_bytes_freed_once_answered() -> None:
    conn = Connection(Socket(), LifecycleCodec(), DEV_IDENTITY, None, request_bytes=1000)  # type: ignore[arg-type]
    ping = Command(c.PING, None, {}, "p")
    assert conn.reserve(ping, 5000) is None, "a request always fits when none is in flight"
    refused = conn.reserve(ping, 10)
    assert isinstance(refused, Failure)
    assert (refused.code, refused.request_id) == (ErrorCode.TOO_MANY_REQUESTS, "p")
    assert "5000 bytes" in refused.message
    answered = asyncio.Event()

    async def handle() -> None:
        await answered.wait()

    running = asyncio.create_task(conn.answer(5000, handle))
    answered.set()
    await running
    assert conn.reserve(ping, 600) is None
    assert conn.reserve(ping, 600) is not None


# ---------------------------------------------------------------- shell input


class StuckShell:
    """A shell stream to an agentctl whose shell stopped reading: input is taken `takes` frames at a time."""

    def __init__(self) -> None:
        self.taken: list[str] = []
        self.takes = asyncio.Semaphore(0)
        self.ended = asyncio.Event()

    async def frames(self) -> AsyncIterator[Any]:
        await self.ended.wait()
        for _ in ():
            yield

    async def send_input(self, data: str) -> None:
        await self.takes.acquire()
        self.taken.append(data)


class StuckAgentctl:
    endpoint = "http://agentctl.stuck:9999"

    def __init__(self) -> None:
        self.channel = StuckShell()

    @asynccontextmanager
    async def shell(self) -> AsyncIterator[StuckShell]:
        yield self.channel


async def test_a_shell_that_does_not_read_holds_at_most_its_queue_and_refuses_the_rest() -> None:
    agentctl = StuckAgentctl()
    shell = ShellStream(agentctl, lambda frame: None, queue_bytes=100)  # type: ignore[arg-type]
    await shell.start()
    alice, bob = object(), object()
    sending = [asyncio.create_task(shell.send_input("a" * 40, alice)) for _ in range(2)]
    sending.append(asyncio.create_task(shell.send_input("b" * 10, bob)))
    await until("queued", lambda: shell.queued_bytes == 90)
    with pytest.raises(RequestError) as full:
        async with asyncio.timeout(WAIT):
            await shell.send_input("c" * 20, bob)
    assert full.value.code == ErrorCode.TOO_MANY_REQUESTS
    assert "90 bytes" in full.value.message
    # Alice leaves: what she queued is let go, but for the frame being written.
    shell.release(alice)
    assert shell.queued_bytes == 50
    await until("alice's second input cancelled", lambda: sending[1].done())
    assert sending[1].cancelled()
    agentctl.channel.takes.release()
    agentctl.channel.takes.release()
    async with asyncio.timeout(WAIT):
        await asyncio.gather(sending[0], sending[2])
    assert agentctl.channel.taken == ["a" * 40, "b" * 10]
    assert shell.queued_bytes == 0
    # A sender that gives up (its client left) takes its input out of the queue too.
    waiting = [asyncio.create_task(shell.send_input(s, bob)) for s in ("first", "second")]
    await until("queued", lambda: shell.queued_bytes == 11)
    waiting[1].cancel()
    await until("cancelled", lambda: shell.queued_bytes == 5)
    await shell.stop()
    with pytest.raises(RequestError, match="closed before this input was written"):
        async with asyncio.timeout(WAIT):
            await waiting[0]
    assert shell.queued_bytes == 0


async def test_shell_input_longer_than_one_message_may_carry_is_refused(gateway: Gateway) -> None:
    await ready(gateway)
    gateway.registry.shells.input_bytes = 8
    conn, _ = client(gateway)
    with pytest.raises(RequestError) as refused:
        await gateway.registry.shells.send(gateway.registry.session(KEY), "é" * 5, conn)  # 10 bytes in UTF-8
    assert (refused.value.code, refused.value.details) == (ErrorCode.VALIDATION_ERROR, {"field": "data"})
    await conn.close()
