"""One client WebSocket: a bounded outbound queue drained by a writer task, and what the client may see.

A client that stops reading fills its queue (in messages or in bytes); it is then told `slow_consumer` and
disconnected, so it never stalls the fan-out to others nor grows the gateway's memory. The frames of its requests
still being answered are bounded in bytes too, and so are the live updates held back while it reads a history. A
client whose token or access no longer holds is told why and disconnected the same way (`shut`), each with a close
code of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode, web

from agentsession.gateway import metrics
from agentsession.gateway.auth import Authenticator, Identity
from agentsession.gateway.codec import Codec, Frame
from agentsession.gateway.commands import Command
from agentsession.gateway.events import AgentUpdate, ErrorCode, Event, Failure
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

# Close codes of the connections the gateway ends, after a typed error that says why (4000-4999: the application's).
CLOSE_UNAUTHORIZED = 4001  # the token was revoked or expired
CLOSE_FORBIDDEN = 4003  # access the connection relied on was withdrawn
CLOSE_SLOW_CONSUMER = 4008
CLOSE_TOO_MANY_CONNECTIONS = 4029  # the user already has the most connections a replica takes
# How long the error and then the close frame of a connection being ended may each wait behind unread output.
SHUT_GRACE = 2.0
QUEUE_BYTES = 16 * 1024 * 1024
REQUEST_BYTES = 8 * 1024 * 1024

# (frame, metrics label, observed at, the future told once the frame is written or never will be)
_Outgoing = tuple[str, str, float, "asyncio.Future[bool] | None"]

# A broadcast hands the same event to every client in a row: encode it once per dialect, not once per client.
_last_encoded: tuple[object, str, str | None] | None = None


def _encode_once(codec: Codec, event: Event) -> str | None:
    global _last_encoded
    if _last_encoded is not None and _last_encoded[0] is event and _last_encoded[1] == codec.name:
        return _last_encoded[2]
    frame = codec.encode(event)
    text = None if frame is None else json.dumps(frame, separators=(",", ":"))
    _last_encoded = (event, codec.name, text)
    return text


@dataclass
class _Held:
    """Live updates held back while the client's history is being read, each with its frame, within `limit` bytes
    of frames; past it they are let go and `overflowed` says so (they are in the journal, which is read again)."""

    limit: int
    updates: list[tuple[AgentUpdate, str | None]] = field(default_factory=list)
    size: int = 0
    overflowed: bool = False

    def add(self, update: AgentUpdate, text: str | None) -> None:
        if self.overflowed:
            return
        self.size += len(text or "")
        if self.size > self.limit:
            self.updates.clear()
            self.overflowed = True
            return
        self.updates.append((update, text))


@dataclass
class _Turns:
    """The histories of one agent asked on one connection: sent one after the other."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: int = 0  # sent or waiting to be


class Connection:
    def __init__(
        self,
        ws: web.WebSocketResponse,
        codec: Codec,
        identity: Identity,
        authenticator: Authenticator | None,
        *,
        queue_size: int = 1024,
        queue_bytes: int = QUEUE_BYTES,
        request_bytes: int = REQUEST_BYTES,
        send_timeout: float = 10.0,
    ) -> None:
        self.ws = ws
        self.codec = codec
        self.identity = identity
        self._auth = authenticator
        self._queue: asyncio.Queue[_Outgoing | None] = asyncio.Queue(queue_size)
        self._queue_bytes = queue_bytes
        self._queued_bytes = 0
        self._waiters: set[asyncio.Future[bool]] = set()
        self._request_bytes = request_bytes
        self._requests_hold = 0  # bytes of the frames of requests not answered yet
        self._send_timeout = send_timeout
        self._namespaces: dict[str, bool] = {}
        self._asking: dict[str, asyncio.Future[bool]] = {}
        self._held: dict[str, _Held] = {}
        self._histories: dict[str, _Turns] = {}  # agents whose history is being sent to this client
        self.live: set[str] = set()  # agents whose updates this client receives
        self.closed = False
        self.dropped_slow = False
        self._dropping: asyncio.Task[None] | None = None
        self._tasks = Supervisor("gateway connection", log)

    # --- authorization ---

    def may_see(self, namespace: str) -> bool | None:
        if self.identity.anonymous_dev:
            return True
        return self._namespaces.get(namespace)

    async def authorize_namespace(self, namespace: str) -> bool:
        """`get` in `namespace`, asked once for the connection: concurrent callers share the one question."""
        known = self.may_see(namespace)
        if known is not None:
            return known
        asking = self._asking.get(namespace)
        if asking is None:
            asking = self._asking[namespace] = asyncio.ensure_future(self._ask_namespace(namespace))
        return await asyncio.shield(asking)

    async def _ask_namespace(self, namespace: str) -> bool:
        try:
            allowed = self._auth is not None and await self._auth.allowed(self.identity, namespace, "get")
            self._namespaces[namespace] = allowed
            return allowed
        finally:
            del self._asking[namespace]

    def admitted(self, namespaces: dict[str, bool]) -> None:
        """What the handshake's admission learnt of `get` in each namespace, kept as this connection's answers."""
        self._namespaces.update(namespaces)

    async def may_update(self, namespace: str, name: str) -> bool:
        """`update` on the session `name`, asked by name so that RBAC's resourceNames can grant one session."""
        if self.identity.anonymous_dev:
            return True
        return self._auth is not None and await self._auth.allowed(self.identity, namespace, "update", name)

    def namespaces_seen(self) -> list[str]:
        """The namespaces this client was allowed to see, whose sessions' changes it receives."""
        return [ns for ns, allowed in self._namespaces.items() if allowed]

    # --- requests ---

    def reserve(self, cmd: Command, size: int) -> Failure | None:
        """Counts a request's frame of `size` bytes against what this client's unanswered requests may hold; the
        refusal to send instead when it does not fit. A request is always taken while none is unanswered."""
        if self._requests_hold and self._requests_hold + size > self._request_bytes:
            message = (
                f"this connection's requests waiting for their answers already hold {self._requests_hold} bytes "
                f"(at most {self._request_bytes}); wait for some of them before sending more"
            )
            return Failure(ErrorCode.TOO_MANY_REQUESTS, message, cmd.action, cmd.request_id, cmd.envelope_id)
        self._requests_hold += size
        return None

    async def answer(self, size: int, handle: Callable[[], Awaitable[None]]) -> None:
        """Runs the handling of a request `reserve` took; its bytes are free again once it is answered."""
        try:
            await handle()
        finally:
            self._requests_hold -= size

    # --- subscriptions ---

    def wants_updates(self, agent_id: str) -> bool:
        return agent_id in self.live or agent_id in self._held

    @contextlib.asynccontextmanager
    async def history_stream(self, agent_id: str) -> AsyncIterator[None]:
        """While a history of `agent_id` is sent to this client: one at a time, and its live updates held back
        (`hold_updates`) until `release_updates`; if the history ends short, they are dropped (the client knows
        from the error, or its leaving, that it does not follow the agent)."""
        turns = self._histories.setdefault(agent_id, _Turns())
        turns.waiting += 1
        try:
            async with turns.lock:
                try:
                    yield
                finally:
                    if agent_id in self._held:
                        self.drop_updates(agent_id)
        finally:
            turns.waiting -= 1
            if not turns.waiting:
                del self._histories[agent_id]

    def streaming_history(self, agent_id: str) -> bool:
        return agent_id in self._histories

    def hold_updates(self, agent_id: str) -> None:
        """From now on, `agent_id`'s live updates are held back (only those from now on: the history read next
        has the earlier ones)."""
        # Half the queue's bytes: at their release they join what the queue already holds.
        self._held[agent_id] = _Held(self._queue_bytes // 2)

    def held_overflowed(self, agent_id: str) -> bool:
        held = self._held.get(agent_id)
        return held is not None and held.overflowed

    def release_updates(self, agent_id: str, after_seq: int, first: list[Event] | None = None) -> None:
        """Go live: `first`, then held updates newer than the history the client just got, then all new ones."""
        held = self._held.pop(agent_id, None)
        self.live.add(agent_id)
        newer = [(u, text) for u, text in (held.updates if held else []) if u.seq > after_seq]
        announced = {u.notification.get("pending_id") for u, _ in newer if u.kind == "permission_request"}
        for event in first or []:
            if isinstance(event, AgentUpdate) and event.notification.get("pending_id") in announced:
                continue
            self.deliver(event)
        for update, text in newer:
            if text is not None:
                self._enqueue(text, type(update).__name__, update.observed_at)

    def drop_updates(self, agent_id: str) -> None:
        self._held.pop(agent_id, None)
        self.live.discard(agent_id)

    # --- sending ---

    def start(self) -> None:
        self._tasks.spawn(self._write_loop(), "writer")

    def deliver(self, event: Event) -> None:
        if self.closed:
            return
        if isinstance(event, AgentUpdate) and (held := self._held.get(event.agent_id)) is not None:
            held.add(event, _encode_once(self.codec, event))
            return
        if self.codec.needs_subscription(event) and event.agent_id not in self.live:  # type: ignore[union-attr]
            return
        text = _encode_once(self.codec, event)
        if text is not None:
            self._enqueue(text, type(event).__name__, getattr(event, "observed_at", 0.0))

    def deliver_tracked(self, event: Event) -> asyncio.Future[bool]:
        """Delivers `event` (one for this client only: it is not kept for others); the future says True once its
        frame is written to the socket, False if it never will be (the client left or was dropped)."""
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        frame = self.codec.encode(event)
        if frame is None:
            written.set_result(True)
        elif not self._enqueue(json.dumps(frame, separators=(",", ":")), type(event).__name__, 0.0, written):
            written.set_result(False)
        return written

    def send_frame(self, frame: Frame, observed_at: float = 0.0, label: str = "reply") -> None:
        self._enqueue(json.dumps(frame, separators=(",", ":")), label, observed_at)

    def _enqueue(
        self, text: str, label: str, observed_at: float, written: asyncio.Future[bool] | None = None
    ) -> bool:
        if self.closed:
            return False
        # A frame is always taken into an empty queue, however big: it is the client's reading that is bounded.
        if self._queued_bytes and self._queued_bytes + len(text) > self._queue_bytes:
            self._drop_slow()
            return False
        try:
            self._queue.put_nowait((text, label, observed_at, written))
        except asyncio.QueueFull:
            self._drop_slow()
            return False
        self._queued_bytes += len(text)
        if written is not None:
            self._waiters.add(written)
        return True

    def _never_written(self) -> None:
        for written in self._waiters:
            if not written.done():
                written.set_result(False)
        self._waiters.clear()

    def _drop_slow(self) -> None:
        if self.dropped_slow:
            return
        self.dropped_slow = True
        metrics.SLOW_CONSUMERS.inc()
        log.warning("dropping a slow client", extra={"user": self.identity.username})
        failure = Failure(
            ErrorCode.SLOW_CONSUMER,
            f"this client read too slowly: more than {self._queue.maxsize} messages or {self._queue_bytes} "
            "bytes were waiting; reconnect",
        )
        self.shut(failure, CLOSE_SLOW_CONSUMER, "slow consumer")

    def shut(self, failure: Failure, code: int, reason: str) -> None:
        """Ends the connection: nothing more is queued for it, the client gets `failure` and then close `code`."""
        if self._dropping is not None:
            return
        # Set at once: from here on no event reaches this client, whatever is still in flight.
        self.closed = True
        self._dropping = self._tasks.spawn(self._shut(self.codec.encode(failure), code, reason), reason)

    async def _shut(self, frame: Frame | None, code: int, reason: str) -> None:
        # The writer stops after the frame it is sending. Cancelled there, it would take with it the wait for the
        # socket to drain, which every later send shares, and the close below would cut the connection at once.
        self._never_written()
        # The error and the close frame wait behind what the client has not read; each gets a bounded chance.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(SHUT_GRACE):
                if frame is not None:
                    await self.ws.send_str(json.dumps(frame))
        with contextlib.suppress(Exception):
            async with asyncio.timeout(SHUT_GRACE):
                await self.ws.close(code=code, message=reason.encode())

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Runs `coro` for as long as the connection lives."""
        self._tasks.spawn(coro, name)

    async def _write_loop(self) -> None:
        try:
            while not self.closed:
                item = await self._queue.get()
                if item is None:
                    return
                text, label, observed_at, written = item
                async with asyncio.timeout(self._send_timeout):
                    await self.ws.send_str(text)
                self._queued_bytes -= len(text)
                # Not kept while the next frame is awaited: it may be a page of history.
                del text, item
                if written is not None:
                    self._waiters.discard(written)
                    if not written.done():
                        written.set_result(True)
                metrics.MESSAGES.labels("out", label).inc()
                if observed_at:
                    metrics.DELIVERY_SECONDS.labels(label).observe(time.monotonic() - observed_at)
        except (ConnectionError, RuntimeError, TimeoutError):
            self.closed = True
            self._never_written()
            with contextlib.suppress(Exception):
                await self.ws.close(code=WSCloseCode.GOING_AWAY)

    async def close(self) -> None:
        self.closed = True
        self._never_written()
        if self._dropping is not None:
            # A slow client's close handshake ends within its grace; cut short, the client never gets its code.
            await asyncio.wait([self._dropping])
        await self._tasks.close()

    def describe(self) -> dict[str, Any]:
        return {"user": self.identity.username, "dialect": self.codec.name}
