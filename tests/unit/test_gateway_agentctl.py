"""The gateway's side of agentctl, over FakeAgentctl: its streams, its error for a failed call, its replies."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentsession.agentctl_client import BAD_ANSWER, AgentctlError
from agentsession.contract.wire import StartRequest, StatusResponse
from agentsession.gateway import commands as c
from agentsession.gateway.commands import Command
from agentsession.gateway.events import AgentUpdate, ErrorCode, Event, Failure, Reply, RequestError
from agentsession.gateway.lifecycle_dialect import agent_answer
from agentsession.gateway.replies import Initialized
from agentsession.gateway.service import Service
from agentsession.gateway.sessions import Session
from agentsession.gateway.upstream import JournalPosition, ShellStream, UpdateStream, request_error
from agentsession.testing.fake_agentctl import PERMISSION_OPTIONS, FakeAgentctl, FakeTurn

AGENT = "ns/a"


async def wait_for(check: Callable[[], object], within: float = 5.0) -> None:
    for _ in range(int(within / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {within}s")


@pytest.mark.parametrize(("status", "code"), [(404, ErrorCode.NOT_FOUND), (409, ErrorCode.CONFLICT),
                                            (422, ErrorCode.VALIDATION_ERROR)])  # fmt: skip
def test_agentctl_refusals_keep_their_meaning_for_clients(status: int, code: str) -> None:
    error = request_error(
        AgentctlError("prompt", "http://a:1", "its words", path="/p", status=status, code="x")
    )
    assert (error.code, error.message, error.details) == (
        code,
        "agentctl: its words",
        {"upstream_status": status},
    )


@pytest.mark.parametrize(
    ("status", "code", "detail"),
    [(500, "internal_error", "Traceback (most recent call last): ..."), (200, BAD_ANSWER, "1 validation error"),
     (404, BAD_ANSWER, "<html>proxy at 10.0.0.7</html>")],
)  # fmt: skip
def test_other_agentctl_failures_say_what_failed_without_its_words(
    status: int, code: str, detail: str
) -> None:
    """agentctl's own failure, or an answer outside its contract, may carry anything: clients get the status."""
    error = request_error(AgentctlError("prompt", "http://a:1", detail, path="/p", status=status, code=code))
    assert (error.code, error.details) == (ErrorCode.UPSTREAM_ERROR, {"upstream_status": status})
    assert error.message == (
        f"the session's agentctl failed this request (HTTP {status}); retry, or see the gateway's log"
    )


def test_an_unreachable_agentctl_is_an_upstream_error_without_its_address() -> None:
    error = request_error(AgentctlError("status", "http://a:1", "ClientConnectorError refused", path="/s"))
    assert (error.code, error.message) == (
        ErrorCode.UPSTREAM_ERROR,
        "the session's agentctl is not reachable right now; retry shortly",
    )


async def test_the_update_stream_delivers_each_seq_once_across_agentctl_restarts() -> None:
    fake = FakeAgentctl()
    await fake.start(
        StartRequest(prompt="before")
    )  # history: clients get it on initialize, not on the stream
    skipped = fake.last_seq
    seen: list[dict[str, Any]] = []
    statuses: list[StatusResponse] = []

    async def read_status() -> StatusResponse:
        statuses.append(await fake.status())
        return statuses[-1]

    stream = UpdateStream(
        fake, JournalPosition(), on_entry=seen.append, read_status=read_status, on_connected=lambda _: None
    )
    stream.start()
    try:
        await wait_for(lambda: stream.connected)
        fake.append("agent_error", {"message": "one"})
        await wait_for(lambda: len(seen) == 1)
        fake.restart()
        fake.append("agent_error", {"message": "two"})  # while the stream is down
        await wait_for(lambda: len(seen) == 2)
        # A fresh workspace whose journal is already longer than the one followed: only its id tells.
        fake.restart(new_journal=True)
        for n in range(skipped + 3):
            fake.append("agent_error", {"message": f"fresh {n}"})
        await wait_for(lambda: len(seen) == 2 + skipped + 3)
    finally:
        await stream.stop()
    assert [(e["seq"], e["notification"]["message"]) for e in seen] == [
        (skipped + 1, "one"),
        (skipped + 2, "two"),
        *[(n + 1, f"fresh {n}") for n in range(skipped + 3)],
    ]
    assert seen[2:] == [entry.model_dump() for entry in fake.journal]  # the JSON agentctl sent
    assert [s.journal_id for s in statuses][-1] == fake.journal_id != statuses[0].journal_id


async def test_the_shell_stream_fans_out_frames_and_forwards_input() -> None:
    fake = FakeAgentctl()
    frames: list[dict[str, Any]] = []
    shell = ShellStream(fake, frames.append)
    with pytest.raises(RequestError, match="not connected"):
        await shell.send_input("early")
    await shell.start()
    try:
        await shell.send_input("ls\n")
        await wait_for(lambda: frames)
        fake.restart()  # the stream reopens on its own
        await wait_for(lambda: ("shell", ()) in fake.calls[1:] and fake.shell_running)
        fake.shell_output("again")
        await wait_for(lambda: len(frames) == 2)
    finally:
        await shell.stop()
    assert fake.shell_inputs == ["ls\n"]
    assert frames == [
        {"type": "output", "data": "ls\n", "code": None},
        {"type": "output", "data": "again", "code": None},
    ]


class _Cache:
    def session(self, key: tuple[str, str]) -> Session:
        return Session.of({"metadata": {"namespace": key[0], "name": key[1]}})


class _Links:
    def __init__(self, agentctl: FakeAgentctl) -> None:
        self.agentctl = agentctl

    async def ready_client(self, session: Session) -> FakeAgentctl:
        return self.agentctl


class _Lifecycle:
    async def start_and_wait(self, key: tuple[str, str]) -> None:
        return None


class _Registry:
    """The part of AgentRegistry the service uses for these commands, with a ready agentctl."""

    def __init__(self, agentctl: FakeAgentctl) -> None:
        self.cache = _Cache()
        self.links = _Links(agentctl)
        self.lifecycle = _Lifecycle()

    def info(self, session: Session) -> dict[str, Any]:
        return {"id": AGENT}

    def session(self, key: tuple[str, str]) -> Session:
        return self.cache.session(key)


class _Connection:
    def __init__(self) -> None:
        self.delivered: list[Event] = []
        self.held: set[str] = set()
        self.released: list[tuple[int, list[Event]]] = []

    async def authorize_namespace(self, namespace: str) -> bool:
        return True

    async def may_update(self, namespace: str, name: str) -> bool:
        return True

    def deliver(self, event: Event) -> None:
        self.delivered.append(event)

    def deliver_tracked(self, event: Event) -> asyncio.Future[bool]:
        self.delivered.append(event)
        written = asyncio.get_running_loop().create_future()
        written.set_result(True)
        return written

    @contextlib.asynccontextmanager
    async def history_stream(self, agent_id: str) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self.held.discard(agent_id)

    def hold_updates(self, agent_id: str) -> None:
        self.held.add(agent_id)

    def held_overflowed(self, agent_id: str) -> bool:
        return False

    def release_updates(self, agent_id: str, after: int, follow: list[Event]) -> None:
        self.held.discard(agent_id)
        self.released.append((after, follow))


async def answer(fake: FakeAgentctl, action: str, **args: Any) -> tuple[Event, _Connection]:
    conn = _Connection()
    service = Service(_Registry(fake))  # type: ignore[arg-type]
    await service.handle(conn, Command(action, AGENT, args))  # type: ignore[arg-type]
    return conn.delivered[0], conn


async def test_replies_are_built_from_agentctl_s_answers() -> None:
    fake = FakeAgentctl()
    started = await fake.start(StartRequest())
    prompt, _ = await answer(fake, c.PROMPT, text="hi")
    mode, _ = await answer(fake, c.SET_MODE, modeId="code")
    cancel, _ = await answer(fake, c.CANCEL)
    assert [(r.action, agent_answer(r.body)) for r in (prompt, mode, cancel) if isinstance(r, Reply)] == [
        (c.PROMPT, {"agentId": AGENT, "accepted": True, "sessionId": started.session_id}),
        (c.SET_MODE, {"agentId": AGENT, "currentModeId": "code"}),
        (c.CANCEL, {"agentId": AGENT, "turnRunning": False}),
    ]

    fake.turns.append(FakeTurn(permission=PERMISSION_OPTIONS))
    await fake.prompt("may I")
    pending = next(iter(fake.pending.values()))
    init, conn = await answer(fake, c.INITIALIZE)
    assert isinstance(init, Reply)
    assert init.body == Initialized(
        AGENT, {"id": AGENT}, [entry.model_dump() for entry in fake.journal], None
    )
    assert conn.released == [
        (
            fake.last_seq,
            [AgentUpdate(AGENT, 0, pending.created_at, "permission_request", pending.model_dump())],
        )
    ]
    respond, _ = await answer(fake, c.PERMISSION_RESPONSE, permissionId=pending.pending_id, optionId="allow")
    assert isinstance(respond, Reply)
    assert agent_answer(respond.body) == {
        "agentId": AGENT,
        "permissionId": pending.pending_id,
        "outcome": {"outcome": "selected", "optionId": "allow"},
    }


async def test_agentctl_failures_reach_the_client_as_gateway_errors() -> None:
    fake = FakeAgentctl()
    refused, _ = await answer(fake, c.PROMPT, text="hi")
    assert refused == Failure(
        ErrorCode.CONFLICT,
        "agentctl: the agent is not attached (state stopped); call POST /api/v1/start",
        c.PROMPT,
        details={"upstream_status": 409, "agentId": AGENT},
    )
    fake.fail_next(AgentctlError("permissions", fake.endpoint, "OSError down"), call="permissions")
    failed, conn = await answer(fake, c.INITIALIZE)
    assert failed == Failure(
        ErrorCode.UPSTREAM_ERROR,
        "the session's agentctl is not reachable right now; retry shortly",
        c.INITIALIZE,
        details={"agentId": AGENT},
    )
    assert conn.held == set()
