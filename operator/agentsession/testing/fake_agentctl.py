"""FakeAgentctl: an agentctl in memory, for unit tests of the code that drives one (the reconciler, the gateway).

It answers as a real agentctl running the demo agent does: the same models, error statuses and codes, and
journal entries. tests/component/test_agentctl_contract.py runs the same checks against it and a real agentctl,
so it cannot drift. Tests script it through its public attributes (agent state, mode, journal, ...) and helpers:
what the next turns do, entries to append, failures of the next calls, a restart of agentctl.
"""

from __future__ import annotations

import asyncio
import bisect
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession.agentctl.entry_limit import fit
from agentsession.agentctl_client.client import AgentctlApi, AgentctlError
from agentsession.api.acp import AgentIdentity, SessionMode
from agentsession.api.times import format_time
from agentsession.contract import routes, wire

SHELL_BUFFER_BYTES = 16 * 1024
PERMISSION_OPTIONS: list[dict[str, Any]] = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


def _now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _timestamp(moment: datetime) -> str:
    return format_time(moment, "milliseconds")


@dataclass
class FakeTurn:
    """What the agent does with one prompt."""

    reply: str | None = None  # its message; None: "You said: <prompt>"
    # Ask for permission with these options first; the turn goes on when the request is answered.
    permission: list[dict[str, Any]] | None = None
    hold: bool = False  # run until `end_turn`


class FakeShell:
    """The ShellChannel of FakeAgentctl.shell(); input is echoed back, as a terminal does."""

    def __init__(self, agentctl: FakeAgentctl) -> None:
        self._agentctl = agentctl
        self._frames: asyncio.Queue[wire.ShellFrame | None] = asyncio.Queue()
        self.closed = False

    async def frames(self) -> AsyncIterator[wire.ShellFrame]:
        while (frame := await self._frames.get()) is not None:
            yield frame

    async def send_input(self, data: str) -> None:
        if self.closed:
            raise AgentctlError(
                routes.SHELL_STREAM.name,
                self._agentctl.endpoint,
                "the shell stream is closed",
                path=routes.SHELL_STREAM.path,
            )
        self._agentctl.shell_inputs.append(data)
        self._agentctl.last_activity_at = _now()
        self._agentctl.shell_output(data)

    def deliver(self, frame: wire.ShellFrame) -> None:
        self._frames.put_nowait(frame)

    def close(self) -> None:
        self.closed = True
        self._frames.put_nowait(None)


class FakeAgentctl:
    """AgentctlApi in memory. Before `start` the agent is "stopped", as in a fresh agentctl."""

    def __init__(
        self,
        endpoint: str = "http://agentctl.fake:9999",
        *,
        history_page_entries: int = wire.HISTORY_PAGE_ENTRIES,
        history_page_bytes: int = wire.HISTORY_PAGE_BYTES,
    ) -> None:
        """Small history pages let a test page through a short journal."""
        self.endpoint = endpoint
        self.history_page_entries = history_page_entries
        self.history_page_bytes = history_page_bytes
        self.agent_state = "stopped"
        self.last_error: str | None = None
        self.session_id: str | None = None
        self.sessions: list[str] = []  # ACP sessions created (not resumed), in order
        self.available_modes = [SessionMode(id="ask", name="Ask"), SessionMode(id="code", name="Code")]
        self.current_mode_id: str | None = None
        self.turn_running = False
        self.turns: deque[FakeTurn] = deque()  # what the next prompts do; then the default FakeTurn()
        self.journal_id = uuid.uuid4().hex
        self.journal: list[wire.JournalEntry] = []
        self.pending: dict[str, wire.PendingPermission] = {}
        self.shell_running = False
        self.shell_log = ""
        self.shell_inputs: list[str] = []
        self.last_activity_at = _now()
        self.stopping = False  # after a drain: prompts are refused until the next start
        self.turn_outlasts_drain = False
        self.calls: list[tuple[str, tuple[Any, ...]]] = []  # every call, with its arguments
        self._failures: list[tuple[str | None, AgentctlError]] = []
        self._streams: set[asyncio.Queue[wire.JournalEntry | None]] = set()
        self._shells: set[FakeShell] = set()
        self._turn: FakeTurn | None = None
        self._prompt = ""
        self._resumable: str | None = None  # the session a start after a restart loads

    # --- helpers for tests ---

    @property
    def last_seq(self) -> int:
        return self.journal[-1].seq if self.journal else 0

    def append(self, kind: str, notification: dict[str, Any]) -> wire.JournalEntry:
        """Journals an entry and delivers it to the open update streams, as agentctl does with agent output:
        one over ENTRY_MAX_BYTES is cut to fit and marked `truncated`."""
        moment = _now()
        entry = wire.JournalEntry.model_validate_json(
            fit(
                {
                    "seq": self.last_seq + 1,
                    "timestamp": _timestamp(moment),
                    "kind": kind,
                    "notification": notification,
                }
            )
        )
        self.journal.append(entry)
        self.last_activity_at = moment
        for stream in self._streams:
            stream.put_nowait(entry.model_copy(deep=True))
        return entry

    def fail_next(self, error: AgentctlError, *, call: str | None = None, times: int = 1) -> None:
        """The next `times` calls (of the route named `call`, or any) raise `error` instead of answering."""
        self._failures.extend([(call, error)] * times)

    def end_turn(self, stop_reason: str = "end_turn") -> None:
        """Ends the running turn (one scripted with `hold`); with "end_turn", after the agent's reply."""
        if self._turn is None:
            raise RuntimeError("no turn is running")
        self._finish(self._reply(self._turn) if stop_reason == "end_turn" else None, stop_reason)

    def shell_output(self, data: str) -> None:
        """Output of the workspace shell: kept in its buffer and sent to the open shell streams."""
        self.shell_log = self.shell_log[-SHELL_BUFFER_BYTES:] + data
        for shell in self._shells:
            shell.deliver(wire.ShellFrame(type="output", data=data))

    def restart(self, *, new_journal: bool = False) -> None:
        """agentctl restarted: streams end, the agent waits for `start`, which resumes the session.

        With `new_journal` the workspace is new: another journal_id, seqs from 1 again, nothing to resume.
        """
        for stream in self._streams:
            stream.put_nowait(None)
        self._streams.clear()
        for shell in self._shells:
            shell.close()
        self._shells.clear()
        self._resumable = None if new_journal else self.session_id or self._resumable
        self.agent_state = "stopped"
        self.session_id = self.current_mode_id = None
        self._turn = None
        self.turn_running = self.shell_running = False
        self.pending.clear()
        self.shell_log = ""
        if new_journal:
            self.journal_id = uuid.uuid4().hex
            self.journal = []

    # --- AgentctlApi ---

    async def start(self, request: wire.StartRequest) -> wire.StartResponse:
        self._enter(routes.START, request)
        self.stopping = False
        self.agent_state = "running"
        wanted = request.session_id or self._resumable
        resumed = prompt_sent = False
        if self.session_id is not None and wanted in (None, self.session_id):
            pass  # the call is idempotent
        elif wanted is not None:
            self.session_id, resumed = wanted, True
        else:
            self.session_id = f"fake-{uuid.uuid4().hex[:16]}"
            self.sessions.append(self.session_id)
            if request.prompt:
                self._begin_turn(self.session_id, request.prompt)
                prompt_sent = True
        self._resumable = None
        self.current_mode_id = self.current_mode_id or self.available_modes[0].id
        if request.mode_id and request.mode_id != self.current_mode_id:
            self._switch_mode(routes.START, request.mode_id)
        return wire.StartResponse(
            success=True,
            session_id=self.session_id,
            resumed=resumed,
            prompt_sent=prompt_sent,
            current_mode_id=self.current_mode_id,
            available_modes=list(self.available_modes),
            agent_info=AgentIdentity(name="fake-agent", title="Fake agent"),
        )

    async def status(self) -> wire.StatusResponse:
        self._enter(routes.STATUS)
        return wire.StatusResponse(
            state=self.agent_state,
            acp=wire.AcpActivity(
                turn_running=self.turn_running,
                session_id=self.session_id,
                current_mode_id=self.current_mode_id,
            ),
            pending_permissions=len(self.pending),
            last_activity_at=self.last_activity_at,
            last_error=self.last_error,
            last_seq=self.last_seq,
            journal_id=self.journal_id,
        )

    async def history(self, after: int = 0, limit: int | None = None) -> wire.HistoryResponse:
        """A page as agentctl makes one, of `history_page_entries` and `history_page_bytes` at most."""
        self._enter(routes.HISTORY, after, limit)
        most = min(limit or self.history_page_entries, self.history_page_entries)
        updates: list[wire.JournalEntry] = []
        size = 0
        next_after: int | None = None
        for entry in self.journal[bisect.bisect_right(self.journal, after, key=lambda e: e.seq) :]:
            entry_size = len(entry.model_dump_json())
            if updates and (len(updates) == most or size + entry_size > self.history_page_bytes):
                next_after = updates[-1].seq
                break
            updates.append(entry.model_copy(deep=True))
            size += entry_size
        return wire.HistoryResponse(
            updates=updates, last_seq=self.last_seq, journal_id=self.journal_id, next=next_after
        )

    async def prompt(self, text: str) -> wire.PromptAccepted:
        self._enter(routes.PROMPT, text)
        session_id = self._session(routes.PROMPT)
        if self.stopping:
            raise self._refuse(
                routes.PROMPT,
                409,
                "conflict",
                "the pod is stopping (the session is being suspended or deleted); prompts are refused",
            )
        if self.turn_running:
            raise self._refuse(
                routes.PROMPT,
                409,
                "conflict",
                "a prompt turn is already running; wait for it or POST /api/v1/acp/cancel",
            )
        if not text:
            raise self._refuse(
                routes.PROMPT, 422, "validation_error", "invalid request body: prompt: too short"
            )
        self._begin_turn(session_id, text)
        return wire.PromptAccepted(accepted=True, sessionId=session_id)

    async def set_mode(self, mode_id: str) -> wire.ModeResponse:
        self._enter(routes.MODE, mode_id)
        self._session(routes.MODE)
        self._switch_mode(routes.MODE, mode_id)
        return wire.ModeResponse(success=True, current_mode_id=mode_id)

    async def cancel(self) -> wire.CancelResponse:
        self._enter(routes.CANCEL)
        self._session(routes.CANCEL)
        for pending in list(self.pending.values()):
            self._resolve(pending, {"outcome": "cancelled"}, "turn_cancelled")
        if self.turn_running:
            self._finish(None, "cancelled")
        return wire.CancelResponse(success=True, turn_running=self.turn_running)

    async def drain(self, timeout_seconds: float) -> wire.DrainResponse:
        """A running turn finishes within the drain, unless `turn_outlasts_drain` says it is cancelled at the
        deadline."""
        self._enter(routes.DRAIN, timeout_seconds)
        self.stopping = True
        if not self.turn_running:
            result = wire.DrainResponse(
                outcome="idle", waited_seconds=0.0, timeout_seconds=timeout_seconds, cancelled_permissions=0
            )
        elif not self.turn_outlasts_drain:
            self._finish(None, "end_turn")
            result = wire.DrainResponse(
                outcome="finished",
                waited_seconds=0.0,
                timeout_seconds=timeout_seconds,
                cancelled_permissions=0,
                stop_reason="end_turn",
            )
        else:
            pending = len(self.pending)
            await self.cancel()
            result = wire.DrainResponse(
                outcome="cancelled",
                waited_seconds=timeout_seconds,
                timeout_seconds=timeout_seconds,
                cancelled_permissions=pending,
                stop_reason="cancelled",
            )
        self.append("drain", result.model_dump(mode="json"))
        return result

    async def permissions(self) -> wire.PermissionsResponse:
        self._enter(routes.PERMISSIONS)
        return wire.PermissionsResponse(pending=[p.model_copy(deep=True) for p in self.pending.values()])

    async def respond_permission(
        self, pending_id: str, option_id: str | None = None, cancelled: bool = False
    ) -> wire.PermissionRespondResponse:
        self._enter(routes.PERMISSION_RESPOND, pending_id, option_id, cancelled)
        if (option_id is None) == (not cancelled):
            raise self._refuse(
                routes.PERMISSION_RESPOND,
                422,
                "validation_error",
                "invalid request body: (body): Value error, give exactly one of 'option_id' or 'cancelled: true'",
            )
        pending = self.pending.get(pending_id)
        if pending is None:
            raise self._refuse(
                routes.PERMISSION_RESPOND,
                404,
                "not_found",
                f"no pending permission request {pending_id!r} (answered, timed out, or never existed)",
            )
        if cancelled:
            outcome: dict[str, Any] = {"outcome": "cancelled"}
        else:
            valid = [str(option.get("optionId")) for option in pending.options]
            if option_id not in valid:
                raise self._refuse(
                    routes.PERMISSION_RESPOND,
                    422,
                    "validation_error",
                    f"option_id {option_id!r} is not one of {valid}",
                )
            outcome = {"outcome": "selected", "optionId": option_id}
        self._resolve(pending, outcome, "responded")
        turn = self._turn
        if turn is not None and self.turn_running:
            said = "selected " + str(outcome["optionId"]) if "optionId" in outcome else "cancelled"
            self._say(f"Permission outcome: {said}.")
            if not turn.hold:
                self._finish(self._reply(turn), "end_turn")
        return wire.PermissionRespondResponse(success=True, pending_id=pending_id, outcome=outcome)

    async def shell_status(self) -> wire.ShellStatusResponse:
        self._enter(routes.SHELL_STATUS)
        return wire.ShellStatusResponse(
            running=self.shell_running,
            pid=4242 if self.shell_running else None,
            cwd="/workspace",
            command=["/bin/sh"],
            buffer_bytes=len(self.shell_log.encode()),
            clients=len(self._shells),
        )

    async def shell_buffer(self) -> wire.ShellBufferResponse:
        self._enter(routes.SHELL_BUFFER)
        self.shell_running = True
        return wire.ShellBufferResponse(buffer=self.shell_log[-SHELL_BUFFER_BYTES:], running=True)

    @asynccontextmanager
    async def updates(self, after: int) -> AsyncIterator[AsyncIterator[wire.JournalEntry]]:
        self._enter(routes.UPDATES, after)
        # Subscribed before the replay is read, as agentctl does: an entry is in one or both, never in neither.
        stream: asyncio.Queue[wire.JournalEntry | None] = asyncio.Queue()
        self._streams.add(stream)
        try:
            yield self._follow(stream, after)
        finally:
            self._streams.discard(stream)

    @asynccontextmanager
    async def shell(self) -> AsyncIterator[FakeShell]:
        self._enter(routes.SHELL_STREAM)
        self.shell_running = True
        channel = FakeShell(self)
        self._shells.add(channel)
        try:
            yield channel
        finally:
            self._shells.discard(channel)

    # --- the agent ---

    def _enter(self, route: routes.Route, *args: Any) -> None:
        self.calls.append((route.name, args))
        for index, (call, error) in enumerate(self._failures):
            if call in (None, route.name):
                del self._failures[index]
                raise error

    def _refuse(self, route: routes.Route, status: int, code: str, message: str) -> AgentctlError:
        return AgentctlError(route.name, self.endpoint, message, path=route.path, status=status, code=code)

    def _session(self, route: routes.Route) -> str:
        if self.agent_state != "running":
            raise self._refuse(
                route,
                409,
                "conflict",
                f"the agent is not attached (state {self.agent_state}); call POST /api/v1/start",
            )
        if self.session_id is None:
            raise self._refuse(
                route,
                409,
                "conflict",
                "no ACP session yet; call POST /api/v1/start or /api/v1/acp/session/new first",
            )
        return self.session_id

    def _switch_mode(self, route: routes.Route, mode_id: str) -> None:
        known = [mode.id for mode in self.available_modes]
        if known and mode_id not in known:
            raise self._refuse(route, 422, "validation_error", f"mode_id {mode_id!r} is not one of {known}")
        self.current_mode_id = mode_id
        self._update({"sessionUpdate": "current_mode_update", "currentModeId": mode_id})

    def _update(self, update: dict[str, Any]) -> None:
        self.append("session_update", {"sessionId": self.session_id, "update": update})

    def _say(self, text: str) -> None:
        self._update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})

    def _reply(self, turn: FakeTurn) -> str:
        return turn.reply if turn.reply is not None else f"You said: {self._prompt}"

    def _begin_turn(self, session_id: str, text: str) -> None:
        # agentctl journals the prompt itself: agents do not echo it.
        self._update({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}})
        turn = self.turns.popleft() if self.turns else FakeTurn()
        self._turn, self._prompt, self.turn_running = turn, text, True
        if turn.permission is not None:
            self._ask_permission(session_id, turn.permission)
        elif not turn.hold:
            self._finish(self._reply(turn), "end_turn")

    def _ask_permission(self, session_id: str, options: list[dict[str, Any]]) -> None:
        moment = _now()
        pending = wire.PendingPermission(
            pending_id=uuid.uuid4().hex,
            session_id=session_id,
            tool_call={
                "toolCallId": "call-1",
                "title": "Write demo.txt",
                "kind": "edit",
                "status": "pending",
            },
            options=options,
            created_at=_timestamp(moment),
            expires_at=_timestamp(moment + timedelta(minutes=5)),
        )
        self.pending[pending.pending_id] = pending
        self.append("permission_request", pending.model_dump())

    def _resolve(self, pending: wire.PendingPermission, outcome: dict[str, Any], reason: str) -> None:
        del self.pending[pending.pending_id]
        self.append(
            "permission_resolved",
            {
                "pending_id": pending.pending_id,
                "session_id": pending.session_id,
                "outcome": outcome,
                "reason": reason,
            },
        )

    def _finish(self, reply: str | None, stop_reason: str) -> None:
        if reply:
            self._say(reply)
        self.append("turn_end", {"sessionId": self.session_id, "stopReason": stop_reason})
        self.turn_running, self._turn = False, None

    async def _follow(
        self, stream: asyncio.Queue[wire.JournalEntry | None], after: int
    ) -> AsyncIterator[wire.JournalEntry]:
        last = after
        for entry in [e.model_copy(deep=True) for e in self.journal if e.seq > after]:
            last = entry.seq
            yield entry
        while (entry_or_end := await stream.get()) is not None:
            if entry_or_end.seq > last:
                last = entry_or_end.seq
                yield entry_or_end


class FakeAgentctlConnector:
    """AgentctlConnector over fakes: one FakeAgentctl per endpoint, made on first use; records each connection."""

    def __init__(self) -> None:
        self.agents: dict[str, FakeAgentctl] = {}
        self.connections: list[tuple[str, str]] = []  # (endpoint, token), in order

    def __call__(self, endpoint: str, token: str) -> AgentctlApi:
        self.connections.append((endpoint, token))
        return self.agent(endpoint)

    def agent(self, endpoint: str) -> FakeAgentctl:
        """The fake at `endpoint`, for a test to script."""
        if endpoint not in self.agents:
            self.agents[endpoint] = FakeAgentctl(endpoint)
        return self.agents[endpoint]
