"""What the gateway does with hostile or careless clients, piece by piece (the component tier fuzzes the whole
process): frames nested past the parser, envelope ids that are falsy, bursts, requests beyond the bound, a slow
client's close handshake, and waits whose clients left."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
from aiohttp import WSMessage, WSMsgType

from agentsession.gateway.agents import AgentRegistry
from agentsession.gateway.auth import DEV_IDENTITY
from agentsession.gateway.codec import Codec
from agentsession.gateway.connection import CLOSE_SLOW_CONSUMER, Connection
from agentsession.gateway.events import AgentStatusChanged, ErrorCode, Failure
from agentsession.gateway.lifecycle_dialect import LifecycleCodec
from agentsession.gateway.server import _serve, _take
from agentsession.gateway.service import Service
from agentsession.gateway.task_dialect import TaskCodec
from agentsession.gateway.watch_cache import SessionCache
from agentsession.tasks import Supervisor
from agentsession.testing.fake_agentctl import FakeAgentctlConnector
from agentsession.testing.fake_kube import FakeKube
from tests.support.release_key import token_of

WAIT = 5.0


class Socket:
    """The gateway's end of one client WebSocket: the frames the client sent, and what the gateway sent back.

    As with aiohttp, while the client does not read, every send waits on one shared future until it reads again.
    """

    def __init__(self, frames: Iterable[str] = ()) -> None:
        self.frames = list(frames)
        self.read = 0
        self.sent: list[str] = []
        self.closed_with: int | None = None
        self.paused = False
        self._drained: asyncio.Future[None] | None = None

    def __aiter__(self) -> AsyncIterator[WSMessage]:
        return self._receive()

    async def _receive(self) -> AsyncIterator[WSMessage]:
        for text in self.frames:
            self.read += 1
            yield WSMessage(WSMsgType.TEXT, text, None)

    async def send_str(self, data: str) -> None:
        self.sent.append(data)
        await self._drain()

    async def close(self, *, code: int = 1000, message: bytes = b"") -> None:
        await self._drain()
        self.closed_with = code

    async def _drain(self) -> None:
        if self.paused:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    def reads_again(self) -> None:
        self.paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(text)["payload"] for text in self.sent]


def connection(ws: Socket, codec: Codec | None = None, queue_size: int = 4) -> Connection:
    conn = Connection(ws, codec or LifecycleCodec(), DEV_IDENTITY, None, queue_size=queue_size)  # type: ignore[arg-type]
    conn.start()
    return conn


async def until(what: str, done: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not done():  # noqa: ASYNC110  (the socket's state has no event to wait on)
            await asyncio.sleep(0.005)
    assert done(), what


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    kube = FakeKube()
    registry = AgentRegistry(
        SessionCache(kube, ["ns"]), kube, FakeAgentctlConnector(), token_of, init_timeout=0.05
    )
    yield Service(registry)
    await registry.close()


# ---------------------------------------------------------------- decoding


@pytest.mark.parametrize(
    ("codec", "code"), [(LifecycleCodec(), "invalid_json"), (TaskCodec(), "BAD_REQUEST")]
)
@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"type": "ping", "payload": ' + "[" * 50_000 + "]" * 50_000 + "}"],
    ids=["a bare nest", "a nest inside a request"],
)
def test_json_nested_past_the_parser_is_a_typed_error(codec: Codec, code: str, text: str) -> None:
    failure = codec.decode(text)
    assert isinstance(failure, Failure)
    assert failure.code == ErrorCode.INVALID_JSON
    assert "nested too deeply" in failure.message
    frame = codec.encode(failure)
    assert frame is not None
    assert frame["payload"]["code"] == code


def test_an_empty_envelope_id_is_echoed_not_replaced() -> None:
    codec = TaskCodec()
    for text in ('{"id": "", "type": "request", "action": "nope"}', '{"id": 0, "action": "nope"}'):
        failure = codec.decode(text)
        assert isinstance(failure, Failure)
        frame = codec.encode(failure)
        assert frame is not None
        assert frame["id"] == str(json.loads(text)["id"])


# ---------------------------------------------------------------- reading


async def test_a_burst_of_bad_frames_is_answered_in_full_by_a_client_that_reads(service: Service) -> None:
    """Each frame gives the writer a turn, so a burst far beyond the client's queue never reads as a slow
    client."""
    ws = Socket(["not json"] * 100)
    conn = connection(ws, queue_size=4)
    await _serve(conn, service, 8)
    await until("every error sent", lambda: len(ws.sent) == 100)
    assert not conn.dropped_slow
    assert {p["code"] for p in ws.payloads()} == {"invalid_json"}
    await conn.close()


async def test_requests_beyond_the_bound_are_refused_with_their_ids(service: Service) -> None:
    ws = Socket()
    conn = connection(ws, TaskCodec(), queue_size=16)
    requests = Supervisor("test requests")
    for _ in range(3):
        requests.spawn(asyncio.Event().wait(), "a request still running")
    ping = '{"id": "p1", "type": "request", "action": "ping"}'
    _take(conn, service, requests, WSMessage(WSMsgType.TEXT, ping, None), 3)
    await until("the refusal sent", lambda: ws.sent)
    refusal = json.loads(ws.sent[0])
    assert (refusal["id"], refusal["type"], refusal["action"]) == ("p1", "error", "ping")
    assert refusal["payload"]["code"] == "TOO_MANY_REQUESTS"
    assert "3 requests" in refusal["payload"]["message"]
    assert len(requests) == 3

    # Below the bound, the same request runs.
    _take(conn, service, requests, WSMessage(WSMsgType.TEXT, ping, None), 4)
    await until("the answer sent", lambda: len(ws.sent) == 2)
    assert json.loads(ws.sent[1])["type"] == "response"
    await requests.close()
    await conn.close()


async def test_a_dropped_client_is_still_read_until_it_closes(service: Service) -> None:
    """Closing a socket with input unread resets it, and the client loses the close code queued for it."""
    ws = Socket(['{"type": "ping"}'] * 10)
    conn = connection(ws)
    conn.closed = True
    await _serve(conn, service, 8)
    assert ws.read == 10
    assert ws.sent == []
    await conn.close()


# ---------------------------------------------------------------- a slow client's close


async def _drop(ws: Socket, conn: Connection) -> None:
    ws.paused = True
    for n in range(20):
        conn.deliver(AgentStatusChanged("ns/a", {"status": "ready", "n": n}))
    await until("the client dropped", lambda: conn.dropped_slow)
    await asyncio.sleep(0.05)


async def test_a_slow_client_that_reads_again_gets_the_error_and_the_close_code() -> None:
    ws = Socket()
    conn = connection(ws)
    await _drop(ws, conn)
    ws.reads_again()
    await until("the close", lambda: ws.closed_with is not None)
    assert ws.closed_with == CLOSE_SLOW_CONSUMER
    assert ws.payloads()[-1]["code"] == "slow_consumer"
    await conn.close()


async def test_closing_the_connection_lets_a_slow_clients_close_finish() -> None:
    """The handler closes its connection as soon as the reading ends; the close code must still go out."""
    ws = Socket()
    conn = connection(ws)
    await _drop(ws, conn)
    closing = asyncio.create_task(conn.close())
    await asyncio.sleep(0.05)
    ws.reads_again()
    await asyncio.wait_for(closing, WAIT)
    assert ws.closed_with == CLOSE_SLOW_CONSUMER


# ---------------------------------------------------------------- waits whose clients left


async def test_an_initialize_whose_clients_all_left_fails_quietly(service: Service) -> None:
    """The shared start ends in a timeout with no one left to hear it: that is not an unhandled error."""
    registry = service.registry
    registry.cache.start()
    await registry.cache.wait_synced()
    await registry.kube.create(
        {"apiVersion": "agentsession.dev/v1alpha1", "kind": "AgentSession",
         "metadata": {"name": "a", "namespace": "ns"}, "spec": {"agent": {"type": "demo"}}}
    )  # fmt: skip
    await until("the session cached", lambda: registry.cache.get(("ns", "a")) is not None)
    unhandled: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    try:
        waiter = asyncio.create_task(registry.lifecycle.start_and_wait(("ns", "a")))
        await asyncio.sleep(0.01)
        shared = registry.lifecycle._inits[("ns", "a")]
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        # Waited for without asking how it ended: only then could its exception go unretrieved.
        await asyncio.wait([shared], timeout=WAIT)
        assert shared.done()
        assert not shared.cancelled()
        del shared, waiter
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
        await registry.cache.stop()
    assert unhandled == []
