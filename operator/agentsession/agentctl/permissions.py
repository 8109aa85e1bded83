"""Permission requests from the agent, parked until a client answers or the timeout cancels them."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession.agentctl.clock import format_ts
from agentsession.agentctl.events import EventHub
from agentsession.agentctl.metrics import Metrics
from agentsession.api.acp import LABEL_MAX_CHARS, MODE_ID_MAX_CHARS, SESSION_ID_MAX_CHARS, cut_text
from agentsession.contract.wire import PendingPermission

PERMISSION_KINDS = frozenset({"permission_request", "permission_resolved"})

CANCELLED: dict[str, Any] = {"outcome": "cancelled"}
# What the agent may park here: its requests wait for a person, up to the permission timeout, each in memory and in
# every client's list. An agent asks for one tool call at a time, or a few when it runs tools in parallel; past
# MAX_PENDING at once a request is answered "cancelled" at once. A tool call larger than TOOL_CALL_MAX_BYTES (as
# JSON) is kept with its strings cut to TOOL_CALL_STRING_CHARS, or, still too large, as its id, title, kind and
# status only, and says so in `_meta` (TRUNCATED_META: its size before); of its options the first MAX_OPTIONS are
# kept, and only those whose id a client can send back.
MAX_PENDING = 32
TOOL_CALL_MAX_BYTES = 1024 * 1024
TOOL_CALL_STRING_CHARS = 64 * 1024
TOOL_CALL_SUMMARY_FIELDS = ("toolCallId", "title", "kind", "status")
MAX_OPTIONS = 16
TRUNCATED_META = "agentsession.dev/truncated"


class TooManyPending(Exception):
    pass


class UnknownPending(LookupError):
    pass


class InvalidOption(ValueError):
    pass


def _cut_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return cut_text(value, limit)
    if isinstance(value, dict):
        return {k: _cut_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, limit) for v in value]
    return value


def bounded_tool_call(tool_call: dict[str, Any]) -> dict[str, Any]:
    """The tool call of a permission request as agentctl keeps it: whole up to TOOL_CALL_MAX_BYTES, else cut."""
    size = len(json.dumps(tool_call))
    if size <= TOOL_CALL_MAX_BYTES:
        return tool_call
    cut = _cut_strings({k: v for k, v in tool_call.items() if k != "_meta"}, TOOL_CALL_STRING_CHARS)
    if len(json.dumps(cut)) > TOOL_CALL_MAX_BYTES:
        cut = {
            k: cut_text(tool_call[k], LABEL_MAX_CHARS)
            for k in TOOL_CALL_SUMMARY_FIELDS
            if isinstance(tool_call.get(k), str)
        }
    return {**cut, "_meta": {TRUNCATED_META: {"bytes": size}}}


def bounded_options(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = [o for o in options if len(str(o.get("optionId"))) <= MODE_ID_MAX_CHARS][:MAX_OPTIONS]
    return [_cut_strings({k: v for k, v in o.items() if k != "_meta"}, LABEL_MAX_CHARS) for o in kept]


@dataclass(slots=True)
class Pending:
    """A request as clients see it (the wire model), and what only agentctl keeps: its start and its answer."""

    request: PendingPermission
    started: float
    future: asyncio.Future[tuple[dict[str, Any], str]] = field(repr=False)

    def public(self) -> dict[str, Any]:
        return self.request.model_dump()


class PermissionBroker:
    def __init__(self, hub: EventHub, timeout: float, metrics: Metrics) -> None:
        self._hub = hub
        self._timeout = timeout
        self._metrics = metrics
        self._pending: dict[str, Pending] = {}

    def pending(self) -> list[dict[str, Any]]:
        return [p.public() for p in self._pending.values()]

    @property
    def count(self) -> int:
        return len(self._pending)

    async def request(
        self, session_id: str, tool_call: dict[str, Any], options: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Publish the request, wait for an answer; returns the ACP outcome object. Raises TooManyPending past
        MAX_PENDING requests at once."""
        if len(self._pending) >= MAX_PENDING:
            raise TooManyPending(
                f"agent asked for permission with {MAX_PENDING} requests already waiting for an answer; "
                "agentctl answered this one cancelled"
            )
        now = datetime.now(UTC)
        request = PendingPermission(
            pending_id=uuid.uuid4().hex,
            session_id=cut_text(session_id, SESSION_ID_MAX_CHARS),
            tool_call=bounded_tool_call(tool_call),
            options=bounded_options(options),
            created_at=format_ts(now),
            expires_at=format_ts(now + timedelta(seconds=self._timeout)),
        )
        pending = Pending(
            request=request,
            started=time.monotonic(),
            future=asyncio.get_running_loop().create_future(),
        )
        self._pending[request.pending_id] = pending
        self._hub.publish("permission_request", pending.public())
        try:
            outcome, reason = await asyncio.wait_for(asyncio.shield(pending.future), self._timeout)
        except TimeoutError:
            outcome, reason = CANCELLED, "timeout"
            self._resolve(pending, outcome, reason)
        except asyncio.CancelledError:
            # The agent withdrew the request (e.g. the connection dropped); record it as cancelled.
            self._resolve(pending, CANCELLED, "withdrawn")
            raise
        return outcome

    def respond(self, pending_id: str, option_id: str | None, cancelled: bool) -> dict[str, Any]:
        pending = self._pending.get(pending_id)
        if pending is None:
            raise UnknownPending(
                f"no pending permission request {pending_id!r} (answered, timed out, or never existed)"
            )
        if cancelled:
            outcome = CANCELLED
        else:
            valid = [str(o.get("optionId")) for o in pending.request.options]
            if option_id not in valid:
                raise InvalidOption(f"option_id {option_id!r} is not one of {valid}")
            outcome = {"outcome": "selected", "optionId": option_id}
        self._resolve(pending, outcome, "responded")
        return outcome

    def cancel_all(self, reason: str) -> None:
        for pending in list(self._pending.values()):
            self._resolve(pending, CANCELLED, reason)

    def _resolve(self, pending: Pending, outcome: dict[str, Any], reason: str) -> None:
        if self._pending.pop(pending.request.pending_id, None) is None:
            return
        if not pending.future.done():
            pending.future.set_result((outcome, reason))
        self._metrics.permission_wait.labels(outcome["outcome"]).observe(time.monotonic() - pending.started)
        self._hub.publish(
            "permission_resolved",
            {
                "pending_id": pending.request.pending_id,
                "session_id": pending.request.session_id,
                "outcome": outcome,
                "reason": reason,
            },
        )
