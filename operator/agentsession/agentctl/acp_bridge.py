"""The ACP client side: drives the agent through the SDK's ClientSideConnection and tracks its state.

One bridge per agentctl. Agent messages are journaled in arrival order; the agent's process state and ACP state
(session, modes, running turn) are kept here for `GET /api/v1/status`.

Where the bridge is with its agent is one `Phase`, moved only along `TRANSITIONS`. Separate flags (a connection
set, initialized, a session id, a turn task, a stop requested) can disagree in the races between an agent's exit,
a stop and a new start; one phase cannot, and a request that comes at the wrong moment gets a 409 naming the move
instead of acting on a half-torn-down attachment.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import time
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, cast

from acp import PROTOCOL_VERSION, Client, RequestError, connect_to_agent
from acp.client.connection import ClientSideConnection
from acp.schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    PromptRequest,
    RequestPermissionResponse,
    SessionNotification,
    ToolCallUpdate,
)
from pydantic import ValidationError

from agentsession.agentctl import __version__
from agentsession.agentctl.agent_input import Refusal, preview
from agentsession.agentctl.channel import AgentChannel
from agentsession.agentctl.clock import utc_now
from agentsession.agentctl.config import Config
from agentsession.agentctl.errors import ApiError, agent_unavailable, conflict, from_agent_error
from agentsession.agentctl.events import EventHub
from agentsession.agentctl.metrics import Metrics
from agentsession.agentctl.permissions import CANCELLED, PermissionBroker, TooManyPending
from agentsession.agentctl.session_store import SessionStore
from agentsession.agentctl.transport import AgentTransport
from agentsession.api.acp import (
    SESSION_ID_MAX_CHARS,
    AgentIdentity,
    bounded_id,
    bounded_modes,
    config_option_modes,
    mode_config_option,
)
from agentsession.contract.live_state import mode_after
from agentsession.contract.wire import AgentState, StartRequest, StartResponse
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_GARBAGE_REPORTS = 20
# Updates that belong to the conversation, as a session/load replays it; the others describe the session now.
CONVERSATION_KINDS = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
    }
)
ReplayFilter = Literal["off", "all", "conversation"]
# Errors that mean no answer came from the agent, as opposed to an answer that says no.
AGENT_GONE = frozenset({"agent_exited", "agent_timeout", "agent_unavailable"})
# ACP's "authentication required" error code.
AUTH_REQUIRED = -32000
# Update kinds are the agent's strings: past this many, invalid ones are journaled without a warning; each is
# remembered, logged and counted cut to KIND_MAX_CHARS.
MAX_INVALID_KINDS = 50
KIND_MAX_CHARS = 100
# The kinds of session/update the ACP schema knows, each a label of agentctl_session_updates_total; any other kind
# counts as "unknown", so the agent cannot add series to the metrics.
KNOWN_KINDS = frozenset(
    kind
    for variant in typing.get_args(SessionNotification.model_fields["update"].annotation)
    for kind in typing.get_args(variant.model_fields["session_update"].annotation)
)
# What the bridge keeps of the agent's description of itself (`GET /api/v1/info`): its capabilities up to this size
# as JSON, else only whether it loads sessions; its API-key methods up to this many, ids up to MODE_ID_MAX_CHARS.
CAPABILITIES_MAX_BYTES = 16 * 1024
MAX_KEY_AUTH_METHODS = 8
# last_error and the agent_error entries hold text the agent chose (its error messages, its stderr): cut to this.
ERROR_MAX_CHARS = 4000
REATTACH_DELAY = 0.5
# After agentctl lost its connection and closed the agent's input, the time an agent that ends at the end of its
# input has to read it, before the FIFOs are opened again: opened at once, the input would not end for it.
LOST_REATTACH_DELAY = 2.0
# Longer than a transport takes to learn how its agent ended (the subprocess one waits up to 3 s).
EXIT_REASON_WAIT = 5.0


class Phase(enum.Enum):
    STOPPED = "stopped"  # nothing attached, as asked (or not started yet)
    ATTACHING = "attaching"  # the transport is connecting an agent
    CONNECTED = "connected"  # pipes open; the agent has not answered initialize yet
    UNANSWERED = "unanswered"  # pipes open; initialize failed: initialize again, or let the pipes go
    INITIALIZED = "initialized"  # initialize answered; no ACP session yet
    SESSION = "session"  # an ACP session is current; no turn running
    TURN = "turn"  # a prompt turn is running
    EXITED = "exited"  # the agent's output ended without agentctl asking; how it ended is being learned
    FAILED = "failed"  # nothing attached: attaching failed, the agent exited, or agentctl let go of it
    STOPPING = "stopping"  # agentctl is stopping the agent


TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.STOPPED: frozenset({Phase.ATTACHING, Phase.STOPPING}),
    Phase.FAILED: frozenset({Phase.ATTACHING, Phase.STOPPING}),
    Phase.ATTACHING: frozenset({Phase.CONNECTED, Phase.FAILED, Phase.STOPPING}),
    Phase.CONNECTED: frozenset(
        {Phase.INITIALIZED, Phase.UNANSWERED, Phase.EXITED, Phase.FAILED, Phase.STOPPING}
    ),
    Phase.UNANSWERED: frozenset({Phase.INITIALIZED, Phase.EXITED, Phase.FAILED, Phase.STOPPING}),
    Phase.INITIALIZED: frozenset({Phase.SESSION, Phase.EXITED, Phase.STOPPING}),
    # SESSION -> SESSION: session/new or session/load replaces the current session.
    Phase.SESSION: frozenset({Phase.SESSION, Phase.TURN, Phase.EXITED, Phase.STOPPING}),
    Phase.TURN: frozenset({Phase.SESSION, Phase.EXITED, Phase.STOPPING}),
    Phase.EXITED: frozenset({Phase.FAILED, Phase.STOPPING}),
    Phase.STOPPING: frozenset({Phase.STOPPED}),
}
ATTACHED = frozenset({Phase.CONNECTED, Phase.UNANSWERED, Phase.INITIALIZED, Phase.SESSION, Phase.TURN})
ACP_INITIALIZED = frozenset({Phase.INITIALIZED, Phase.SESSION, Phase.TURN})
IN_SESSION = frozenset({Phase.SESSION, Phase.TURN})
# The `state` of `GET /api/v1/status`, a contract with the operator: coarser than the phases.
REPORTED_STATE: dict[Phase, AgentState] = {
    Phase.STOPPED: "stopped",
    Phase.ATTACHING: "starting",
    Phase.CONNECTED: "starting",
    Phase.UNANSWERED: "error",
    Phase.INITIALIZED: "running",
    Phase.SESSION: "running",
    Phase.TURN: "running",
    Phase.EXITED: "error",
    Phase.FAILED: "error",
    Phase.STOPPING: "stopping",
}


class IllegalTransition(ApiError):
    """A move `TRANSITIONS` does not allow: a request racing an exit, a stop or another request, or a bug."""

    def __init__(self, current: Phase, target: Phase) -> None:
        super().__init__(409, "conflict", f"the agent cannot go from {current.value} to {target.value}")


def receive_loop(conn: ClientSideConnection) -> asyncio.Task[Any] | None:
    """The SDK's task that reads the agent's messages. The SDK offers no handle on it (in acp 0.12 it is the
    connection's `_conn._recv_task`, which a unit test checks), yet its end is the one sure sign that no answer
    will come any more."""
    task = getattr(getattr(conn, "_conn", None), "_recv_task", None)
    return task if isinstance(task, asyncio.Task) else None


def _dump(model: Any) -> dict[str, Any]:
    out: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return out


def _settle(future: asyncio.Future[str], result: str) -> None:
    if not future.done():
        future.set_result(result)


async def _hold(turn: asyncio.Task[str]) -> None:
    """Keeps a turn until it ends: its caller may not wait for it (?wait=false). The ApiError that cuts a turn
    short is journaled as its end and raised to a caller that waits; it is no failure for the supervisor to log."""
    with contextlib.suppress(ApiError):
        await turn


class BridgeClient:
    """The `acp.Client` agentctl offers the agent: permissions and updates, no file system or terminals."""

    def __init__(self, bridge: AgentBridge) -> None:
        self._bridge = bridge

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        try:
            outcome = await self._bridge.permissions.request(
                session_id, _dump(tool_call), [_dump(o) for o in options]
            )
        except TooManyPending as exc:
            self._bridge.report_protocol_error(str(exc))
            outcome = CANCELLED
        return RequestPermissionResponse.model_validate({"outcome": outcome})

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None


class AcpState:
    def __init__(self) -> None:
        self.protocol_version: int | None = None
        self.agent_info: dict[str, Any] | None = None
        self.agent_capabilities: dict[str, Any] = {}
        # The agent's API-key methods (ACP `env_var` auth methods), in the order it prefers them.
        self.key_auth_methods: list[str] = []
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.current_mode_id: str | None = None
        self.available_modes: list[dict[str, Any]] = []
        # Set when the modes are the values of this config option (set with session/set_config_option).
        self.mode_config_id: str | None = None
        self.turn_started_at: str | None = None
        self.last_stop_reason: str | None = None

    @property
    def load_session(self) -> bool:
        return bool(self.agent_capabilities.get("loadSession"))

    def set_modes(self, modes: dict[str, Any] | None, config_options: Any) -> None:
        """Take the modes from a mode config option if there is one (ACP prefers it), else from `modes`;
        with neither, the modes known so far stay."""
        option = mode_config_option(config_options)
        if option is not None and bounded_id(option["id"]) is not None:
            self.mode_config_id = option["id"]
            self.current_mode_id = bounded_id(option.get("currentValue"))
            self.available_modes = [m.model_dump(exclude_none=True) for m in config_option_modes(option)]
        elif modes is not None:
            self.mode_config_id = None
            self.current_mode_id = bounded_id(modes.get("currentModeId"))
            self.available_modes = [
                m.model_dump(exclude_none=True) for m in bounded_modes(modes.get("availableModes") or [])
            ]

    def set_identity(self, answer: dict[str, Any]) -> None:
        """What the agent's answer to initialize says of it, as far as the bounds go."""
        info = answer.get("agentInfo")
        try:
            self.agent_info = (
                AgentIdentity.model_validate(info).model_dump(exclude_none=True) if info else None
            )
        except ValidationError:
            self.agent_info = None
        capabilities = answer.get("agentCapabilities") or {}
        if len(json.dumps(capabilities)) > CAPABILITIES_MAX_BYTES:
            capabilities = {"loadSession": bool(capabilities.get("loadSession"))}
        self.agent_capabilities = capabilities
        self.key_auth_methods = [
            m["id"]
            for m in answer.get("authMethods", [])
            if m.get("type") == "env_var" and bounded_id(m.get("id")) is not None
        ][:MAX_KEY_AUTH_METHODS]


class AgentBridge:
    def __init__(
        self,
        config: Config,
        transport: AgentTransport,
        hub: EventHub,
        permissions: PermissionBroker,
        metrics: Metrics,
        store: SessionStore,
    ) -> None:
        self.config = config
        self.transport = transport
        self.hub = hub
        self.permissions = permissions
        self.metrics = metrics
        self.store = store
        self._phase = Phase.STOPPED
        self.last_error: str | None = None
        self.last_error_at: str | None = None
        self.pid: int | None = None
        self.attachments = 0
        self.acp = AcpState()
        # The connection and channel of the attachment, set in the phases of ATTACHED.
        self._conn: ClientSideConnection | None = None
        self._channel: AgentChannel | None = None
        self._tasks = Supervisor("agentctl", log)
        self._op_lock = asyncio.Lock()
        self._replay: ReplayFilter = "off"
        self._garbage_reports = 0
        self._invalid_kinds: set[str] = set()
        # What the operator asked for last, start or stop: a fifo agent that exits is waited for only after a start.
        self._resume_wanted = False
        self._reattach: asyncio.Task[None] | None = None
        self._preparing: asyncio.Task[None] | None = None
        self._initialized = asyncio.Event()
        # How the current attachment ended, for the calls it cut short.
        self._ended: asyncio.Future[str] | None = None
        self._turn: asyncio.Task[str] | None = None
        # Set by a drain: the pod is stopping, so no new turn may begin; a start clears it.
        self.stopping = False

    # ----- state -----

    @property
    def phase(self) -> Phase:
        return self._phase

    def _move(self, target: Phase) -> None:
        if target not in TRANSITIONS[self._phase]:
            raise IllegalTransition(self._phase, target)
        log.debug("agent phase %s -> %s", self._phase.value, target.value)
        self._phase = target
        if target in ACP_INITIALIZED:
            self._initialized.set()
        else:
            self._initialized.clear()

    async def wait_initialized(self, wait_s: float) -> bool:
        """Whether the agent has answered ACP initialize, waiting up to `wait_s` for it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._initialized.wait(), wait_s)
        return self._initialized.is_set()

    @property
    def state(self) -> AgentState:
        return REPORTED_STATE[self._phase]

    @property
    def turn_running(self) -> bool:
        return self._phase is Phase.TURN

    @property
    def current_turn(self) -> asyncio.Task[str] | None:
        """The running turn's task (its result is the stop reason), or None."""
        turn = self._turn
        return turn if turn is not None and not turn.done() and self.turn_running else None

    def status(self) -> dict[str, Any]:
        a = self.acp
        return {
            "state": self.state,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "pid": self.pid,
            "attachments": self.attachments,
            **self.transport.describe(),
            "acp": {
                "initialized": self._phase in ACP_INITIALIZED,
                "protocol_version": a.protocol_version,
                "agent_info": a.agent_info,
                "load_session": a.load_session,
                "session_id": a.session_id,
                "cwd": a.cwd,
                "current_mode_id": a.current_mode_id,
                "available_modes": a.available_modes,
                "turn_running": self.turn_running,
                "turn_started_at": a.turn_started_at if self.turn_running else None,
                "last_stop_reason": a.last_stop_reason,
            },
        }

    def _record_error(self, message: str, kind: str) -> None:
        if len(message) > ERROR_MAX_CHARS:
            message = message[:ERROR_MAX_CHARS] + "..."
        self.last_error = message
        self.last_error_at = utc_now()
        self.metrics.errors.labels(kind).inc()
        self.hub.publish(
            "agent_error", {"error": kind, "message": message, "session_id": self.acp.session_id}
        )
        log.warning("agent error: %s", message, extra={"kind": kind})

    # ----- messages from the agent (called by the channel, in order) -----

    def _on_message(self, message: dict[str, Any]) -> bool:
        """Journal a session/update as it came; True when the message is done with and the SDK must not get it.

        The SDK would only validate each update and pass it to a no-op handler, in a task of its own that can
        reorder them; one that does not validate (a newer kind, a field the SDK's models reject) it would log
        with a traceback and drop. Here the journal keeps it, and the log says so once per kind.
        """
        if message.get("method") != "session/update" or "id" in message:
            return False
        params = message.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict) or not isinstance(update.get("sessionUpdate"), str):
            shown = preview(json.dumps(params).encode())
            self._record_error(f"agent sent a malformed session/update: {shown}", "agent_protocol")
            return True
        kind = update["sessionUpdate"]
        try:
            SessionNotification.model_validate(params)
        except ValidationError as exc:
            self._warn_invalid(kind[:KIND_MAX_CHARS], exc)
        if kind == "config_option_update":
            # The option's values are the modes on offer as well.
            self.acp.set_modes(None, update.get("configOptions"))
        self.acp.current_mode_id = mode_after(update, self.acp.current_mode_id)
        if self.acp.current_mode_id not in (None, self.store.record.mode_id):
            # A mode the agent chose itself is the one to restore on resume, not the last one agentctl set.
            self.store.record.mode_id = self.acp.current_mode_id
            self.store.save()
        if self._replay == "all" or (self._replay == "conversation" and kind in CONVERSATION_KINDS):
            # session/load replays what the journal already holds; journaling it again would duplicate it.
            self.metrics.updates.labels("replayed").inc()
            return True
        self.metrics.updates.labels(kind if kind in KNOWN_KINDS else "unknown").inc()
        self.hub.publish("session_update", cast(dict[str, Any], params))
        return True

    def _warn_invalid(self, kind: str, exc: ValidationError) -> None:
        if kind in self._invalid_kinds or len(self._invalid_kinds) >= MAX_INVALID_KINDS:
            return
        self._invalid_kinds.add(kind)
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        log.warning(
            "agent sent a session/update of kind %r that the ACP schema of this agentctl does not accept"
            " (%s: %s); journaled as sent, and further ones of this kind are not reported",
            kind,
            where[:300],
            first["msg"][:300],
            extra={"kind": kind},
        )

    def _on_refused(self, refusal: Refusal) -> None:
        self._garbage_reports += 1
        if self._garbage_reports > MAX_GARBAGE_REPORTS:
            self.metrics.errors.labels("agent_protocol").inc()
            return
        answered = ""
        if refusal.answerable:
            answered = "; answered with an error" if refusal.request else "; taken as an error answer"
        self._record_error(
            f"agent wrote a line to stdout that is not JSON-RPC agentctl accepts ({refusal.reason}){answered}",
            "agent_protocol",
        )

    def report_protocol_error(self, message: str) -> None:
        """Something the agent asked for that agentctl refused (too many permission requests at once)."""
        self._record_error(message, "agent_protocol")

    def _on_eof(self, channel: AgentChannel) -> None:
        """The agent's output ended. The channel calls this before the SDK fails the pending requests, so a turn
        the exit cut short is still in TURN here."""
        if channel is not self._channel:
            return  # agentctl ended this attachment itself
        self._lose_attachment(None)

    def _on_receive_loop_end(self, channel: AgentChannel, loop: asyncio.Task[Any]) -> None:
        """The SDK's receive loop ended. After the agent's EOF, or when agentctl closed the connection, that is
        expected; otherwise it failed, no answer can come any more, and every call would fail: the agent is
        stopped (a pod's agent, its stdin closed, exits and its container restarts) and its end is reported as
        an exit is, so that state, readiness and status say so."""
        if channel is not self._channel or channel.eof.is_set():
            return
        failure = None if loop.cancelled() else loop.exception()
        log.error("the ACP connection's receive loop ended without the agent's EOF", exc_info=failure)
        self._lose_attachment(
            "agentctl stopped reading the agent's messages after an internal error (see agentctl's log)"
        )

    def _lose_attachment(self, lost: str | None) -> None:
        """The attachment is over without agentctl asking: the agent exited (`lost` None), or agentctl lost its
        connection to it (`lost` says how)."""
        conn, ended = self._require_conn(), self._ended
        assert ended is not None
        turn_was_running = self._phase is Phase.TURN
        self._conn = self._channel = None
        self._move(Phase.EXITED)
        self._tasks.spawn(self._record_exit(conn, ended, turn_was_running, lost), "exit")

    # ----- attachment -----

    async def _attach(self, wait_s: float | None) -> ClientSideConnection:
        if self._phase is Phase.EXITED:
            # Let the exit be recorded first: recorded later, it would reset the new attachment.
            await self._why_lost(self._ended)
        if self._phase in ATTACHED:
            return self._require_conn()
        self._move(Phase.ATTACHING)
        try:
            pipes = await asyncio.wait_for(self.transport.attach(), wait_s)
        except BaseException as exc:
            # Cancelled too: a later start must not find the bridge still attaching (unless a stop took over).
            if self._phase is Phase.ATTACHING:
                self._move(Phase.FAILED)
            if isinstance(exc, TimeoutError):
                raise agent_unavailable(
                    f"the agent did not connect within {wait_s:g}s ({self.transport.name} transport); retry later"
                ) from None
            if isinstance(exc, ConnectionError | OSError):
                self.last_error, self.last_error_at = str(exc), utc_now()
                raise agent_unavailable(str(exc)) from exc
            raise
        # "running" waits for the agent's answer to initialize: an open pipe alone does not prove an agent.
        self._move(Phase.CONNECTED)
        channel = AgentChannel(pipes, self._on_message, self._on_refused, lambda: self._on_eof(channel))
        # BridgeClient implements the part of acp.Client an agentctl offers; the SDK answers the rest.
        conn = connect_to_agent(cast(Client, BridgeClient(self)), channel)
        self._conn, self._channel = conn, channel
        loop = receive_loop(conn)
        if loop is None:
            log.warning("cannot watch the ACP SDK's receive loop; a failure of it would go unnoticed")
        else:
            loop.add_done_callback(lambda task: self._on_receive_loop_end(channel, task))
        self._ended = asyncio.get_running_loop().create_future()
        self.pid = pipes.pid
        self.attachments += 1
        self.metrics.agent_attachments.inc()
        self._garbage_reports = 0
        return conn

    async def _record_exit(
        self,
        conn: ClientSideConnection,
        ended: asyncio.Future[str],
        turn_was_running: bool,
        lost: str | None,
    ) -> None:
        # A loss is said at once: the calls it cut short wait for the reason.
        reason = await self.transport.exit_reason() if lost is None else f"{lost}; agentctl stopped the agent"
        _settle(ended, reason)
        self.permissions.cancel_all("agent_exited")
        # Otherwise a stop took over while the reason was learned, and says how the attachment ended.
        if self._phase is Phase.EXITED:
            self._reset_acp()
            self._move(Phase.FAILED)
            if lost is None:
                what = "agent exited during a turn" if turn_was_running else "agent exited"
                self._record_error(f"{what}: {reason}", "agent_exited")
                self._attach_again()
            else:
                what = "during a turn: " if turn_was_running else ""
                self._record_error(
                    f"agentctl lost the ACP connection to the agent {what}{reason}", "agent_lost"
                )
                # A start meanwhile attaches an agent of its own (the transport stops this one first).
                await self.transport.detach(stop_agent=True)
                self._tasks.spawn(self._attach_again_after(LOST_REATTACH_DELAY), "attach again")
        with contextlib.suppress(Exception):
            await conn.close()

    def _attach_again(self) -> None:
        """After the agent's end: a pod's agent is attached again as soon as its container has restarted."""
        if self.transport.name != "fifo" or self._phase is not Phase.FAILED:
            return
        # An exit seen while a re-attach is already trying (its pipes broke) must not start a second one.
        if not self._resume_wanted:
            self.prepare_in_background()
        elif self._reattach is None or self._reattach.done():
            self._reattach = self._tasks.spawn(self._reattach_loop(), "reattach")

    async def _attach_again_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._attach_again()

    async def _reattach_loop(self) -> None:
        """A restarted agent container reopens the FIFOs; resume its session there without re-prompting."""
        while self._resume_wanted:
            try:
                await self.start(StartRequest(), attach_wait_s=None)
                log.info("re-attached to the restarted agent", extra={"session_id": self.acp.session_id})
                return
            except ApiError as exc:
                log.warning("re-attach failed: %s", exc.message)
                await self._abandon_unanswered()
                await asyncio.sleep(REATTACH_DELAY)

    def prepare_in_background(self) -> None:
        if self._preparing is None or self._preparing.done():
            self._preparing = self._tasks.spawn(self.prepare(), "prepare")

    async def prepare(self) -> None:
        """In a pod the agent runs before anyone asks for a session: attach and initialize it now, so a start only
        opens the session, and the agent container's readiness (`GET /health/agent`) says when the agent answers.
        A start or a stop takes over; a failure is logged and tried again, as a start would."""
        while self._preparable():
            await self.transport.agent_present()
            async with self._op_lock:
                if not self._preparable():
                    return
                try:
                    await self._attach(self.config.attach_timeout)
                    await self.initialize()
                    log.info("the agent answered ACP initialize", extra={"agent": self.acp.agent_info})
                    return
                except ApiError as exc:
                    log.warning("the agent did not answer ACP initialize: %s; trying again", exc.message)
            await self._abandon_unanswered()
            await asyncio.sleep(REATTACH_DELAY)

    def _preparable(self) -> bool:
        return not self._resume_wanted and self._phase in (Phase.STOPPED, Phase.FAILED)

    async def _abandon_unanswered(self) -> None:
        """Let go of pipes whose reader never answered initialize: the next attempt opens them afresh and
        waits for an agent that is really there, instead of queueing more requests to one that is not."""
        async with self._op_lock:
            if self._phase not in (Phase.CONNECTED, Phase.UNANSWERED):
                return
            conn = self._require_conn()
            self._conn = self._channel = None
            self._move(Phase.FAILED)
            self._end_attachment("agentctl gave up on an agent that did not answer initialize")
            with contextlib.suppress(Exception):
                await conn.close()
            await self.transport.detach(stop_agent=False)

    def _end_attachment(self, reason: str) -> None:
        if self._ended is not None:
            _settle(self._ended, reason)

    async def _why_lost(self, ended: asyncio.Future[str] | None) -> str | None:
        """How the attachment a call went out on ended; its watcher may still be learning it."""
        if ended is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(ended), EXIT_REASON_WAIT)
        except TimeoutError:
            return None

    def _reset_acp(self) -> None:
        self.acp = AcpState()
        self.pid = None

    def _require_conn(self) -> ClientSideConnection:
        if self._phase not in ATTACHED:
            raise conflict(
                f"the agent is not attached (state {self.state}"
                + (f", last error: {self.last_error}" if self.last_error else "")
                + "); call POST /api/v1/start"
            )
        assert self._conn is not None
        return self._conn

    def _require_session(self, session_id: str | None) -> str:
        self._require_conn()
        if self._phase not in IN_SESSION:
            raise conflict("no ACP session yet; call POST /api/v1/start or /api/v1/acp/session/new first")
        assert self.acp.session_id is not None
        if session_id is not None and session_id != self.acp.session_id:
            raise ApiError(404, "not_found", f"session {session_id!r} is not the current session")
        return self.acp.session_id

    async def _call(self, method: str, call: Awaitable[T], wait_s: float | None = None) -> T:
        ended = self._ended
        try:
            return await asyncio.wait_for(call, wait_s if wait_s is not None else self.config.attach_timeout)
        except RequestError as exc:
            raise from_agent_error(method, exc) from exc
        except TimeoutError:
            raise ApiError(504, "agent_timeout", f"agent did not answer {method} in time") from None
        except ConnectionError as exc:
            # Not last_error: that may be an older, unrelated error, and the exit may not be recorded yet.
            reason = await self._why_lost(ended) or str(exc)
            raise ApiError(502, "agent_exited", f"agent connection lost during {method}: {reason}") from exc

    # ----- ACP operations -----

    def _check_cwd(self, cwd: str | None) -> str:
        if cwd is None:
            return self.acp.cwd or self.store.record.cwd or str(self.config.workdir)
        from pathlib import Path

        path = Path(cwd)
        if not path.is_absolute() or "\x00" in cwd:
            raise ApiError(422, "validation_error", f"cwd must be an absolute path, got {cwd!r}")
        if not path.is_dir():
            raise ApiError(422, "validation_error", f"cwd {cwd!r} is not an existing directory")
        return cwd

    async def initialize(self, protocol_version: int = PROTOCOL_VERSION) -> dict[str, Any]:
        conn = await self._attach(self.config.attach_timeout)
        try:
            resp = await self._call(
                "initialize",
                conn.initialize(
                    protocol_version=protocol_version,
                    client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=False, write_text_file=False), terminal=False
                    ),
                    client_info=Implementation(name="agentctl", title="agentctl", version=__version__),
                ),
            )
        except ApiError as exc:
            self.last_error, self.last_error_at = exc.message, utc_now()
            # Not after an exit or a stop meanwhile, nor when a working connection is initialized again.
            if self._phase is Phase.CONNECTED:
                self._move(Phase.UNANSWERED)
            raise
        # Initialize again on an initialized connection leaves its session and turn as they are.
        if self._phase not in ACP_INITIALIZED:
            self._move(Phase.INITIALIZED)
        self.acp.protocol_version = resp.protocol_version
        answer = _dump(resp)
        self.acp.set_identity(answer)
        return answer

    async def _authenticated(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        """Runs session/new or session/load; when the agent asks for authentication first (Codex does, unless
        its model provider is configured), authenticates with the API-key methods it offers, in its order (the
        keys are in its environment, from the session's credentials Secret), then runs the call again."""
        try:
            return await self._call(method, call())
        except ApiError as exc:
            if exc.details.get("agent_error_code") != AUTH_REQUIRED or not self.acp.key_auth_methods:
                raise
        conn = self._require_initialized()
        refused = []
        for method_id in self.acp.key_auth_methods:
            try:
                await self._call("authenticate", conn.authenticate(method_id=method_id))
            except ApiError as exc:
                refused.append(f"{method_id}: {exc.message}")
                continue
            log.info("authenticated with the agent's API-key method", extra={"method_id": method_id})
            return await self._call(method, call())
        raise ApiError(
            502,
            "agent_auth_required",
            f"the agent asks for authentication before {method} and refused each of its API-key methods "
            f"({'; '.join(refused)}): put the key it names in the Secret of spec.agent.credentialsSecretRef",
        )

    def _require_initialized(self) -> ClientSideConnection:
        conn = self._require_conn()
        if self._phase not in ACP_INITIALIZED:
            raise conflict("ACP is not initialized; call POST /api/v1/acp/initialize or /api/v1/start first")
        return conn

    async def new_session(self, cwd: str | None) -> dict[str, Any]:
        conn = self._require_initialized()
        cwd = self._check_cwd(cwd)
        self._replay = "off"
        resp = await self._authenticated("session/new", lambda: conn.new_session(cwd=cwd, mcp_servers=[]))
        if len(resp.session_id) > SESSION_ID_MAX_CHARS:
            raise ApiError(
                502,
                "agent_protocol",
                f"the agent named its new session with an id of {len(resp.session_id)} characters; agentctl "
                f"takes ids of at most {SESSION_ID_MAX_CHARS}",
            )
        self._session_opened()
        self.acp.session_id, self.acp.cwd = resp.session_id, cwd
        self.acp.current_mode_id, self.acp.available_modes, self.acp.mode_config_id = None, [], None
        raw = _dump(resp)
        self.acp.set_modes(raw.get("modes"), raw.get("configOptions"))
        self._remember(prompt_sent=False)
        return raw

    async def load_session(self, session_id: str, cwd: str | None) -> dict[str, Any]:
        conn = self._require_initialized()
        if not self.acp.load_session:
            raise ApiError(501, "agent_unsupported", "the agent does not support session/load")
        cwd = self._check_cwd(cwd)
        replaying = self.hub.journal.has_entries()
        self._replay = "all" if replaying else "off"
        try:
            resp = await self._authenticated(
                "session/load", lambda: conn.load_session(cwd=cwd, session_id=session_id, mcp_servers=[])
            )
        except BaseException:
            self._replay = "off"
            raise
        # Some agents (gemini-cli) stream the history after answering session/load: until the next turn, the
        # conversation's updates are still that replay.
        self._replay = "conversation" if replaying else "off"
        self._session_opened()
        self.acp.session_id, self.acp.cwd = session_id, cwd
        raw = _dump(resp) if resp is not None else {}
        self.acp.set_modes(raw.get("modes"), raw.get("configOptions"))
        if self.store.record.session_id != session_id:
            self._remember(prompt_sent=False)
        return raw

    def _session_opened(self) -> None:
        # A turn still running goes on; the new session is the one the next turn uses.
        if self._phase is not Phase.TURN:
            self._move(Phase.SESSION)

    def _remember(self, prompt_sent: bool) -> None:
        rec = self.store.record
        rec.session_id, rec.cwd, rec.prompt_sent = self.acp.session_id, self.acp.cwd, prompt_sent
        rec.mode_id = self.acp.current_mode_id
        self.store.save()

    def _blocks(self, prompt: str | list[dict[str, Any]], session_id: str) -> list[Any]:
        raw = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else prompt
        try:
            return list(PromptRequest.model_validate({"sessionId": session_id, "prompt": raw}).prompt)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ApiError(
                422, "validation_error", f"invalid prompt content block at {where}: {first['msg']}"
            ) from exc

    def begin_turn(
        self, prompt: str | list[dict[str, Any]], session_id: str | None = None
    ) -> asyncio.Task[str]:
        sid = self._require_session(session_id)
        if self.stopping:
            raise conflict(
                "the pod is stopping (the session is being suspended or deleted); prompts are refused"
            )
        if self._phase is Phase.TURN:
            raise conflict("a prompt turn is already running; wait for it or POST /api/v1/acp/cancel")
        blocks = self._blocks(prompt, sid)
        conn = self._require_conn()
        self._replay = "off"
        for block in blocks:
            # Agents do not echo the user's prompt during a turn; the journal records it so history is whole.
            self.hub.publish(
                "session_update",
                {
                    "sessionId": sid,
                    "update": {"sessionUpdate": "user_message_chunk", "content": _dump(block)},
                },
            )
        self.acp.turn_started_at = utc_now()
        self._move(Phase.TURN)
        turn = asyncio.create_task(self._run_turn(conn, sid, blocks), name="agentctl: turn")
        self._turn = turn
        self._tasks.spawn(_hold(turn), "turn")
        return turn

    async def _run_turn(self, conn: ClientSideConnection, session_id: str, blocks: list[Any]) -> str:
        started = time.monotonic()
        stop_reason = "error"
        try:
            resp = await self._call(
                "session/prompt", conn.prompt(session_id=session_id, prompt=blocks), wait_s=1e9
            )
            stop_reason = str(resp.stop_reason)
            return stop_reason
        except ApiError as exc:
            self.hub.publish(
                "turn_end", {"sessionId": session_id, "stopReason": "error", "error": exc.message}
            )
            raise
        finally:
            self.metrics.turns.labels(stop_reason).inc()
            self.metrics.turn_duration.observe(time.monotonic() - started)
            self.acp.last_stop_reason = stop_reason
            if stop_reason != "error":
                self.hub.publish("turn_end", {"sessionId": session_id, "stopReason": stop_reason})
            # Not when the agent exited or was stopped meanwhile: then the turn ended with its attachment.
            if self._phase is Phase.TURN and self._conn is conn:
                self._move(Phase.SESSION)

    async def cancel(self, session_id: str | None) -> bool:
        sid = self._require_session(session_id)
        conn = self._require_conn()
        # ACP: on cancel the client answers every pending permission request of the turn with "cancelled".
        self.permissions.cancel_all("turn_cancelled")
        await self._call("session/cancel", conn.cancel(session_id=sid))
        return self.turn_running

    async def set_mode(self, mode_id: str, session_id: str | None) -> str:
        sid = self._require_session(session_id)
        conn = self._require_conn()
        known = [m.get("id") for m in self.acp.available_modes]
        if known and mode_id not in known:
            raise ApiError(422, "validation_error", f"mode_id {mode_id!r} is not one of {known}")
        config_id = self.acp.mode_config_id
        if config_id is None:
            await self._call("session/set_mode", conn.set_session_mode(session_id=sid, mode_id=mode_id))
            self.acp.current_mode_id = mode_id
        else:
            resp = await self._call(
                "session/set_config_option",
                conn.set_config_option(config_id=config_id, session_id=sid, value=mode_id),
            )
            self.acp.current_mode_id = mode_id
            # The answer holds every option's value as the agent now has it.
            self.acp.set_modes(None, _dump(resp).get("configOptions"))
        self.store.record.mode_id = mode_id
        self.store.save()
        return mode_id

    # ----- the operator's entry point -----

    async def start(self, req: StartRequest, attach_wait_s: float | None = -1) -> StartResponse:
        attach_timeout = self.config.attach_timeout if attach_wait_s == -1 else attach_wait_s
        async with self._op_lock:
            self._resume_wanted = True
            self.stopping = False
            await self._attach(attach_timeout)
            if self._phase not in ACP_INITIALIZED:
                await self.initialize()
            wanted = req.session_id or self.store.record.session_id
            resumed = prompt_sent = False
            extra: dict[str, Any] = {}
            if self._phase in IN_SESSION and wanted in (None, self.acp.session_id):
                pass  # idempotent repeat
            elif wanted is not None:
                cwd = req.cwd or self.store.record.cwd
                if self.acp.load_session:
                    try:
                        await self.load_session(wanted, cwd)
                        resumed = True
                    except ApiError as exc:
                        if exc.code in AGENT_GONE:
                            raise
                        # The agent answered that it cannot load the session (its store was outside the
                        # workspace, or it never wrote it: gemini-cli sometimes says "No previous sessions
                        # found"). The journal still has the history; continue in a new ACP session without
                        # re-sending the prompt.
                        extra["load_error"] = exc.message
                        await self.new_session(cwd)
                else:
                    await self.new_session(cwd)
                    extra["load_error"] = "the agent does not support session/load; started a new session"
            else:
                await self.new_session(req.cwd)
                if req.prompt:
                    self.begin_turn(req.prompt)
                    prompt_sent = True
                    self._remember(prompt_sent=True)
            mode = req.mode_id or (self.store.record.mode_id if resumed else None)
            if mode and mode != self.acp.current_mode_id:
                await self.set_mode(mode, None)
            assert self.acp.session_id is not None
            info = self.acp.agent_info
            return StartResponse.model_validate(
                {
                    "success": True,
                    "session_id": self.acp.session_id,
                    "resumed": resumed,
                    "prompt_sent": prompt_sent,
                    "current_mode_id": self.acp.current_mode_id,
                    "available_modes": self.acp.available_modes,
                    "agent_info": info,
                    "protocol_version": self.acp.protocol_version or PROTOCOL_VERSION,
                    **extra,
                }
            )

    async def stop(self) -> None:
        if self._preparing is not None:
            self._preparing.cancel()
        async with self._op_lock:
            self._resume_wanted = False
            if self._reattach is not None:
                self._reattach.cancel()
            conn, self._conn, self._channel = self._conn, None, None
            self._end_attachment("agentctl stopped the agent")
            self._move(Phase.STOPPING)
            try:
                self.permissions.cancel_all("agent_stopped")
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                await self.transport.detach(stop_agent=True)
            finally:
                # However the transport fared, nothing is attached now; a stuck STOPPING would refuse every start.
                self._reset_acp()
                self._move(Phase.STOPPED)

    async def shutdown(self) -> None:
        await self.stop()
        await self._tasks.close()
