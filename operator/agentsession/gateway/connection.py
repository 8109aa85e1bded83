"""One client WebSocket: a bounded outbound queue drained by a writer task, and what the client may see.

A client that stops reading fills its queue; it is then told `slow_consumer` and disconnected, so it never
stalls the fan-out to others nor grows the gateway's memory. A client whose token or access no longer holds is
told why and disconnected the same way (`shut`), each with a close code of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode, web

from agentsession.gateway import metrics
from agentsession.gateway.auth import Authenticator, Identity
from agentsession.gateway.codec import Codec, Frame
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
class _Pending:
    """Updates held back while the client's history is being fetched."""

    buffer: list[AgentUpdate] = field(default_factory=list)


class Connection:
    def __init__(
        self,
        ws: web.WebSocketResponse,
        codec: Codec,
        identity: Identity,
        authenticator: Authenticator | None,
        *,
        queue_size: int = 1024,
        send_timeout: float = 10.0,
    ) -> None:
        self.ws = ws
        self.codec = codec
        self.identity = identity
        self._auth = authenticator
        self._queue: asyncio.Queue[tuple[str, str, float] | None] = asyncio.Queue(queue_size)
        self._send_timeout = send_timeout
        self._namespaces: dict[str, bool] = {}
        self._pending: dict[str, _Pending] = {}
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
        known = self.may_see(namespace)
        if known is not None:
            return known
        allowed = self._auth is not None and await self._auth.allowed(self.identity, namespace, "get")
        self._namespaces[namespace] = allowed
        return allowed

    async def may_update(self, namespace: str, name: str) -> bool:
        """`update` on the session `name`, asked by name so that RBAC's resourceNames can grant one session."""
        if self.identity.anonymous_dev:
            return True
        return self._auth is not None and await self._auth.allowed(self.identity, namespace, "update", name)

    def namespaces_seen(self) -> list[str]:
        """The namespaces this client was allowed to see, whose sessions' changes it receives."""
        return [ns for ns, allowed in self._namespaces.items() if allowed]

    # --- subscriptions ---

    def wants_updates(self, agent_id: str) -> bool:
        return agent_id in self.live or agent_id in self._pending

    def hold_updates(self, agent_id: str) -> None:
        if agent_id not in self.live:
            self._pending.setdefault(agent_id, _Pending())

    def release_updates(self, agent_id: str, after_seq: int, first: list[Event] | None = None) -> None:
        """Go live: `first`, then held updates newer than the history the client just got, then all new ones."""
        pending = self._pending.pop(agent_id, None)
        self.live.add(agent_id)
        held = [u for u in (pending.buffer if pending else []) if u.seq > after_seq]
        announced = {u.notification.get("pending_id") for u in held if u.kind == "permission_request"}
        for event in first or []:
            if isinstance(event, AgentUpdate) and event.notification.get("pending_id") in announced:
                continue
            self.deliver(event)
        for update in held:
            self.deliver(update)

    def drop_updates(self, agent_id: str) -> None:
        self._pending.pop(agent_id, None)
        self.live.discard(agent_id)

    # --- sending ---

    def start(self) -> None:
        self._tasks.spawn(self._write_loop(), "writer")

    def deliver(self, event: Event) -> None:
        if self.closed:
            return
        if isinstance(event, AgentUpdate) and event.agent_id in self._pending:
            self._pending[event.agent_id].buffer.append(event)
            return
        if self.codec.needs_subscription(event) and event.agent_id not in self.live:  # type: ignore[union-attr]
            return
        text = _encode_once(self.codec, event)
        if text is not None:
            self._enqueue(text, type(event).__name__, getattr(event, "observed_at", 0.0))

    def send_frame(self, frame: Frame, observed_at: float = 0.0, label: str = "reply") -> None:
        self._enqueue(json.dumps(frame, separators=(",", ":")), label, observed_at)

    def _enqueue(self, text: str, label: str, observed_at: float) -> None:
        if self.closed:
            return
        try:
            self._queue.put_nowait((text, label, observed_at))
        except asyncio.QueueFull:
            self._drop_slow()

    def _drop_slow(self) -> None:
        if self.dropped_slow:
            return
        self.dropped_slow = True
        metrics.SLOW_CONSUMERS.inc()
        log.warning("dropping a slow client", extra={"user": self.identity.username})
        failure = Failure(
            ErrorCode.SLOW_CONSUMER,
            f"this client read too slowly: more than {self._queue.maxsize} messages were waiting; reconnect",
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
                text, label, observed_at = item
                async with asyncio.timeout(self._send_timeout):
                    await self.ws.send_str(text)
                metrics.MESSAGES.labels("out", label).inc()
                if observed_at:
                    metrics.DELIVERY_SECONDS.labels(label).observe(time.monotonic() - observed_at)
        except (ConnectionError, RuntimeError, TimeoutError):
            self.closed = True
            with contextlib.suppress(Exception):
                await self.ws.close(code=WSCloseCode.GOING_AWAY)

    async def close(self) -> None:
        self.closed = True
        if self._dropping is not None:
            # A slow client's close handshake ends within its grace; cut short, the client never gets its code.
            await asyncio.wait([self._dropping])
        await self._tasks.close()

    def describe(self) -> dict[str, Any]:
        return {"user": self.identity.username, "dialect": self.codec.name}
