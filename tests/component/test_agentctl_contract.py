"""FakeAgentctl keeps agentctl's contract: the same checks run against the fake and a real agentctl process.

The `contract` tests are parametrized over both; tests of the real client's own behavior (errors, the call
observer) and of the fake's test helpers (failures, restarts, scripted turns) follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentsession.agentctl_client import AgentctlApi, AgentctlClient, AgentctlError
from agentsession.contract.routes import HISTORY, START, STATUS
from agentsession.contract.wire import ENTRY_MAX_BYTES, JournalEntry, StartRequest
from agentsession.testing.fake_agentctl import (
    PERMISSION_OPTIONS,
    FakeAgentctl,
    FakeAgentctlConnector,
    FakeTurn,
)
from tests.support.processes import agentctl_process, free_port

TOKEN = "contract-token"
WAIT = 15.0
# The demo agent asks for a permission when a prompt names one.
PERMISSION_PROMPT = "may I have permission"


@dataclass
class Backend:
    api: AgentctlApi
    ask_permission: Callable[[], None]  # makes the next prompt's turn ask for a permission
    outlast_drains: Callable[[], None] = lambda: None  # a turn waiting for a permission outlasts any drain


@pytest.fixture(params=["fake", "real"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "fake":
        fake = FakeAgentctl()
        yield Backend(
            fake,
            lambda: fake.turns.append(FakeTurn(permission=PERMISSION_OPTIONS)),
            lambda: setattr(fake, "turn_outlasts_drain", True),
        )
        return
    with agentctl_process(tmp_path / "workspace", TOKEN, tmp_path / "agentctl.log") as process:
        async with aiohttp.ClientSession() as http:
            yield Backend(AgentctlClient(http, process.url, TOKEN), lambda: None)


async def read_until(
    entries: AsyncIterator[JournalEntry], last: Callable[[JournalEntry], bool]
) -> list[JournalEntry]:
    """Entries up to and including the first one `last` accepts."""
    seen: list[JournalEntry] = []
    async with asyncio.timeout(WAIT):
        async for entry in entries:
            seen.append(entry)
            if last(entry):
                return seen
    raise AssertionError(f"the stream ended after {seen}")


def is_turn_end(entry: JournalEntry) -> bool:
    return entry.kind == "turn_end"


def update_kind(entry: JournalEntry) -> str | None:
    return str(entry.notification["update"]["sessionUpdate"]) if entry.kind == "session_update" else None


def said(entries: list[JournalEntry]) -> str:
    return "".join(
        e.notification["update"]["content"]["text"]
        for e in entries
        if update_kind(e) == "agent_message_chunk"
    )


# --- the contract, on both ---


async def test_start_makes_one_session_and_status_reports_it(backend: Backend) -> None:
    api = backend.api
    before = await api.status()
    assert (before.state, before.acp.session_id, before.last_seq) == ("stopped", None, 0)
    assert before.journal_id
    with pytest.raises(AgentctlError) as refused:
        await api.prompt("too early")
    assert (refused.value.status, refused.value.code, refused.value.call) == (409, "conflict", "prompt")

    started = await api.start(StartRequest())
    assert started.success
    assert started.session_id
    assert (started.resumed, started.prompt_sent, started.current_mode_id) == (False, False, "ask")
    assert [mode.id for mode in started.available_modes] == ["ask", "code"]
    for again in [
        await api.start(StartRequest()),
        await api.start(StartRequest(session_id=started.session_id)),
    ]:
        assert (again.session_id, again.resumed) == (started.session_id, False)

    after = await api.status()
    assert (after.state, after.acp.session_id, after.acp.current_mode_id) == (
        "running",
        started.session_id,
        "ask",
    )
    assert (after.acp.turn_running, after.pending_permissions, after.journal_id) == (
        False,
        0,
        before.journal_id,
    )


async def test_a_prompt_turn_comes_on_the_stream_and_stays_in_the_history(backend: Backend) -> None:
    api = backend.api
    await api.start(StartRequest())
    status = await api.status()
    async with api.updates(status.last_seq) as entries:
        accepted = await api.prompt("hello there")
        assert (accepted.accepted, accepted.session_id) == (True, status.acp.session_id)
        turn = await read_until(entries, is_turn_end)

    assert update_kind(turn[0]) == "user_message_chunk"
    assert turn[0].notification["update"]["content"]["text"] == "hello there"
    assert "You said: hello there" in said(turn)
    assert turn[-1].notification["stopReason"] == "end_turn"
    assert [e.seq for e in turn] == list(range(status.last_seq + 1, status.last_seq + 1 + len(turn)))

    history = await api.history()
    assert history.updates == turn
    assert (history.last_seq, history.journal_id) == (turn[-1].seq, status.journal_id)
    assert (await api.history(turn[0].seq)).updates == turn[1:]
    async with api.updates(0) as replay:
        assert await read_until(replay, is_turn_end) == turn
    assert (await api.status()).last_seq == turn[-1].seq


async def test_the_history_comes_in_pages_that_follow_next_to_the_end(backend: Backend) -> None:
    api = backend.api
    await api.start(StartRequest(prompt="a turn long enough for several pages"))
    async with api.updates(0) as entries:
        turn = await read_until(entries, is_turn_end)
    whole = await api.history()
    assert (whole.updates, whole.next) == (turn, None)

    pages: list[list[JournalEntry]] = []
    after = 0
    while True:
        page = await api.history(after, limit=2)
        assert page.last_seq == turn[-1].seq
        pages.append(page.updates)
        if page.next is None:
            break
        assert page.next == page.updates[-1].seq
        after = page.next
    assert [len(p) for p in pages] == [2] * (len(turn) // 2) + ([len(turn) % 2] if len(turn) % 2 else [])
    assert [e for p in pages for e in p] == turn
    caught_up = await api.history(turn[-1].seq)
    assert (caught_up.updates, caught_up.next) == ([], None)


async def test_the_initial_prompt_goes_with_the_first_start_only(backend: Backend) -> None:
    api = backend.api
    first = await api.start(StartRequest(prompt="first words"))
    assert first.prompt_sent
    async with api.updates(0) as entries:
        turn = await read_until(entries, is_turn_end)
    assert turn[0].notification["update"]["content"]["text"] == "first words"
    assert not (await api.start(StartRequest(prompt="first words"))).prompt_sent


async def test_a_mode_switch_is_journaled_and_an_unknown_mode_refused(backend: Backend) -> None:
    api = backend.api
    await api.start(StartRequest())
    async with api.updates((await api.status()).last_seq) as entries:
        switched = await api.set_mode("code")
        update = (await read_until(entries, lambda e: update_kind(e) == "current_mode_update"))[-1]
    assert (switched.success, switched.current_mode_id) == (True, "code")
    assert update.notification["update"]["currentModeId"] == "code"
    assert (await api.status()).acp.current_mode_id == "code"
    with pytest.raises(AgentctlError) as refused:
        await api.set_mode("nope")
    assert (refused.value.status, refused.value.code) == (422, "validation_error")
    assert "nope" in refused.value.detail


async def test_a_cancel_without_a_turn_leaves_none_running(backend: Backend) -> None:
    api = backend.api
    with pytest.raises(AgentctlError) as refused:
        await api.cancel()
    assert (refused.value.status, refused.value.code) == (409, "conflict")
    await api.start(StartRequest())
    cancelled = await api.cancel()
    assert (cancelled.success, cancelled.turn_running) == (True, False)


async def test_a_permission_request_waits_for_its_answer(backend: Backend) -> None:
    api = backend.api
    await api.start(StartRequest())
    backend.ask_permission()
    async with api.updates((await api.status()).last_seq) as entries:
        await api.prompt(PERMISSION_PROMPT)
        asked = (await read_until(entries, lambda e: e.kind == "permission_request"))[-1]
        pending = (await api.permissions()).pending
        assert [p.model_dump() for p in pending] == [asked.notification]
        assert [option["optionId"] for option in pending[0].options] == ["allow", "reject"]
        status = await api.status()
        assert (status.pending_permissions, status.acp.turn_running) == (1, True)

        pending_id = pending[0].pending_id
        for option, cancelled in [("nope", False), ("allow", True), (None, False)]:
            with pytest.raises(AgentctlError) as refused:
                await api.respond_permission(pending_id, option, cancelled)
            assert (refused.value.status, refused.value.code) == (422, "validation_error"), option
        answered = await api.respond_permission(pending_id, "reject")
        assert (answered.success, answered.pending_id) == (True, pending_id)
        assert answered.outcome == {"outcome": "selected", "optionId": "reject"}
        rest = await read_until(entries, is_turn_end)

    resolved = [e.notification for e in rest if e.kind == "permission_resolved"]
    assert [(r["pending_id"], r["outcome"], r["reason"]) for r in resolved] == [
        (pending_id, answered.outcome, "responded")
    ]
    assert "Permission outcome: selected reject." in said(rest)
    with pytest.raises(AgentctlError) as gone:
        await api.respond_permission(pending_id, cancelled=True)
    assert (gone.value.status, gone.value.code) == (404, "not_found")
    assert pending_id in gone.value.detail
    assert (await api.permissions()).pending == []


async def test_a_drain_without_a_turn_is_idle_and_prompts_wait_for_the_next_start(backend: Backend) -> None:
    api = backend.api
    await api.start(StartRequest())
    drained = await api.drain(5)
    assert (drained.outcome, drained.cancelled_permissions, drained.stop_reason) == ("idle", 0, None)
    with pytest.raises(AgentctlError) as refused:
        await api.prompt("too late")
    assert (refused.value.status, refused.value.code) == (409, "conflict")
    assert "stopping" in refused.value.detail
    await api.start(StartRequest())
    assert (await api.prompt("after a new start")).accepted


async def test_a_turn_still_running_at_the_drain_deadline_is_cancelled_with_its_permission(
    backend: Backend,
) -> None:
    api = backend.api
    await api.start(StartRequest())
    backend.ask_permission()
    backend.outlast_drains()
    async with api.updates((await api.status()).last_seq) as entries:
        await api.prompt(PERMISSION_PROMPT)
        await read_until(entries, lambda e: e.kind == "permission_request")
        drained = await api.drain(0.5)
        rest = await read_until(entries, lambda e: e.kind == "drain")
    assert (drained.outcome, drained.cancelled_permissions) == ("cancelled", 1)
    assert drained.stop_reason == "cancelled"
    assert drained.waited_seconds >= 0.5
    resolved = [e.notification for e in rest if e.kind == "permission_resolved"]
    assert [(r["outcome"], r["reason"]) for r in resolved] == [({"outcome": "cancelled"}, "turn_cancelled")]
    assert [e.notification["stopReason"] for e in rest if is_turn_end(e)] == ["cancelled"]
    # The history says how the turn ended: the drain's own entry, after the turn's end.
    assert rest[-1].notification == drained.model_dump(mode="json")
    assert not (await api.status()).acp.turn_running


async def test_the_shell_starts_on_demand_and_echoes_input(backend: Backend) -> None:
    api = backend.api
    assert not (await api.shell_status()).running
    output = ""
    async with api.shell() as shell:
        await shell.send_input("echo contract-marker\n")
        async with asyncio.timeout(WAIT):
            async for frame in shell.frames():
                if frame.type == "output":
                    output += frame.data or ""
                if "contract-marker" in output:
                    break
    buffer = await api.shell_buffer()
    assert buffer.running
    assert "contract-marker" in buffer.buffer
    status = await api.shell_status()
    assert status.running
    assert status.cwd
    assert status.buffer_bytes >= len("contract-marker")


# --- the real client's own behavior ---


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_an_unreachable_agentctl_is_an_error_naming_the_call_and_url(
    http: aiohttp.ClientSession,
) -> None:
    calls: list[tuple[str, str]] = []
    endpoint = f"http://127.0.0.1:{free_port()}"
    client = AgentctlClient(
        http, endpoint, TOKEN, on_call=lambda call, outcome, _: calls.append((call, outcome))
    )
    with pytest.raises(AgentctlError) as failed:
        await client.status()
    assert (failed.value.status, failed.value.code, failed.value.endpoint) == (None, "unreachable", endpoint)
    assert str(failed.value).startswith(f"agentctl status at {endpoint}{STATUS.path} failed: ")
    with pytest.raises(AgentctlError) as stream_failed:
        async with client.updates(0):
            pass
    assert (stream_failed.value.status, stream_failed.value.call) == (None, "updates")
    assert calls == [("status", "error")]


async def test_refusals_carry_agentctl_s_status_code_and_words(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    calls: list[tuple[str, str]] = []
    with agentctl_process(tmp_path / "workspace", TOKEN, tmp_path / "agentctl.log") as process:
        client = AgentctlClient(
            http, process.url, TOKEN, on_call=lambda call, outcome, _: calls.append((call, outcome))
        )
        await client.status()
        with pytest.raises(AgentctlError) as refused:
            await client.prompt("too early")
        intruder = AgentctlClient(http, process.url, "wrong-token")
        with pytest.raises(AgentctlError) as unauthorized:
            await intruder.history()
        with pytest.raises(AgentctlError) as upgrade:
            async with intruder.updates(0):
                pass
    assert calls == [("status", "ok"), ("prompt", "error")]
    assert refused.value.detail == "the agent is not attached (state stopped); call POST /api/v1/start"
    assert f"answered HTTP 409: conflict: {refused.value.detail}" in str(refused.value)
    assert "/api/v1/acp/prompt?wait=false" in str(refused.value)
    assert (unauthorized.value.status, unauthorized.value.code) == (401, "unauthorized")
    assert (upgrade.value.status, upgrade.value.code) == (401, "upgrade_refused")


async def test_answers_outside_the_contract_are_bad_answers(http: aiohttp.ClientSession) -> None:
    async def failed_start(request: web.Request) -> web.Response:
        return web.json_response({"success": False, "session_id": ""})

    async def not_json(request: web.Request) -> web.Response:
        return web.Response(text="<html>hello</html>")

    async def proxy_error(request: web.Request) -> web.Response:
        return web.Response(status=502, text="Bad Gateway")

    app = web.Application()
    app.router.add_post(START.path, failed_start)
    app.router.add_get(STATUS.path, not_json)
    app.router.add_get(HISTORY.path, proxy_error)
    async with TestServer(app, host="127.0.0.1") as server:
        client = AgentctlClient(http, str(server.make_url("")), TOKEN)
        with pytest.raises(AgentctlError) as start:
            await client.start(StartRequest())
        with pytest.raises(AgentctlError) as status:
            await client.status()
        with pytest.raises(AgentctlError) as history:
            await client.history()
    assert (start.value.status, start.value.code) == (200, "bad_answer")
    assert "success is false" in str(start.value)
    assert (status.value.status, status.value.code) == (200, "bad_answer")
    assert "answered an unexpected body" in str(status.value)
    assert (history.value.status, history.value.code, history.value.detail) == (
        502,
        "bad_answer",
        "Bad Gateway",
    )
    assert str(history.value).endswith("answered HTTP 502: Bad Gateway")


# --- the fake's helpers ---


async def test_scripted_failures_hit_the_next_matching_calls() -> None:
    fake = FakeAgentctl()
    refused = AgentctlError(
        "status", fake.endpoint, "boom", path=STATUS.path, status=500, code="internal_error"
    )
    fake.fail_next(refused, call="status", times=2)
    await fake.history()
    for _ in range(2):
        with pytest.raises(AgentctlError) as raised:
            await fake.status()
        assert raised.value is refused
    await fake.status()
    fake.fail_next(AgentctlError("any", fake.endpoint, "down"))
    with pytest.raises(AgentctlError, match="down"):
        async with fake.updates(0):
            pass
    assert [name for name, _ in fake.calls] == ["history", "status", "status", "status", "updates"]


async def test_a_restart_ends_the_streams_and_start_resumes_the_session() -> None:
    fake = FakeAgentctl()
    started = await fake.start(StartRequest(prompt="one"))
    async with fake.updates(fake.last_seq) as entries:
        fake.restart()
        assert [entry async for entry in entries] == []
    assert (await fake.status()).state == "stopped"
    resumed = await fake.start(StartRequest())
    assert (resumed.session_id, resumed.resumed) == (started.session_id, True)
    journal_id, last_seq = fake.journal_id, fake.last_seq
    assert last_seq > 0

    fake.restart(new_journal=True)
    status = await fake.status()
    assert status.journal_id != journal_id
    assert status.last_seq == 0
    fresh = await fake.start(StartRequest())
    assert not fresh.resumed
    assert fake.sessions == [started.session_id, fresh.session_id]


async def test_appended_entries_reach_open_streams_once() -> None:
    fake = FakeAgentctl()
    early = fake.append("agent_error", {"message": "early"})
    async with fake.updates(0) as entries:
        late = fake.append("agent_error", {"message": "late"})
        got = await read_until(entries, lambda e: e.seq == late.seq)
    assert got == [early, late]


async def test_a_held_turn_runs_until_ended() -> None:
    fake = FakeAgentctl()
    await fake.start(StartRequest())
    fake.turns.append(FakeTurn(reply="done", hold=True))
    await fake.prompt("work")
    assert (await fake.status()).acp.turn_running
    with pytest.raises(AgentctlError) as busy:
        await fake.prompt("more")
    assert (busy.value.status, busy.value.code) == (409, "conflict")
    fake.end_turn()
    assert fake.journal[-1].notification == {"sessionId": fake.session_id, "stopReason": "end_turn"}
    assert said(fake.journal) == "done"
    assert not (await fake.status()).acp.turn_running


async def test_the_fake_pages_by_bytes_and_cuts_an_entry_over_the_limit_as_agentctl_does() -> None:
    fake = FakeAgentctl(history_page_bytes=3000)
    written = [fake.append("agent_error", {"message": "x" * 1000}) for _ in range(5)]
    big = fake.append("agent_error", {"message": "y" * (2 * ENTRY_MAX_BYTES)})
    assert big.truncated is not None
    assert big.truncated.bytes > 2 * ENTRY_MAX_BYTES
    assert len(big.model_dump_json()) <= ENTRY_MAX_BYTES
    first = await fake.history()
    assert (first.updates, first.next) == (written[:2], written[1].seq)
    # A page holds one entry at least, even one larger than the page's bytes.
    rest = [await fake.history(seq) for seq in (written[1].seq, written[3].seq, written[4].seq)]
    assert [(page.updates, page.next) for page in rest] == [
        (written[2:4], written[3].seq),
        ([written[4]], written[4].seq),
        ([big], None),
    ]


def test_the_connector_keeps_one_fake_per_endpoint_and_records_connections() -> None:
    connector = FakeAgentctlConnector()
    first = connector("http://a:9999", "t1")
    assert connector("http://a:9999", "t2") is first is connector.agent("http://a:9999")
    assert connector("http://b:9999", "t3") is not first
    assert connector.connections == [
        ("http://a:9999", "t1"),
        ("http://a:9999", "t2"),
        ("http://b:9999", "t3"),
    ]
