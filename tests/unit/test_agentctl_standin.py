"""The scale benchmarks' stand-in agentctl answers the operator's and the gateway's calls within the contract:
the shared client (which parses every answer into the contract's models) talks to it as to a real agentctl."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from benchmarks.agentctl_standin import STATS_PATH, Journal, build_app

from agentsession.agentctl_client import AgentctlClient
from agentsession.contract.routes import STATUS
from agentsession.contract.wire import HISTORY_PAGE_BYTES, StartRequest


@pytest.fixture
async def standin() -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    async with TestServer(build_app()) as server, aiohttp.ClientSession() as http:
        yield http, str(server.make_url("")).rstrip("/")


async def test_each_token_is_one_session_whose_start_is_idempotent(
    standin: tuple[aiohttp.ClientSession, str],
) -> None:
    http, url = standin
    one, other = AgentctlClient(http, url, "token-1"), AgentctlClient(http, url, "token-2")
    first = await one.start(StartRequest(prompt="hello", mode_id="code"))
    again = await one.start(StartRequest(prompt="hello"))
    assert first == again
    assert (first.session_id, first.current_mode_id, first.prompt_sent) == (again.session_id, "code", True)
    assert (await other.start(StartRequest())).session_id != first.session_id
    status = await one.status()
    assert (status.acp.session_id, status.acp.turn_running, status.last_seq) == (first.session_id, False, 0)
    assert (await one.drain(5)).outcome == "idle"
    assert (await one.history()).updates == []
    async with http.get(url + STATS_PATH) as answer:
        stats = await answer.json()
    # Each client asked once which instance it signs for.
    assert stats["calls"] == {"health": 2, "start": 3, "status": 1, "drain": 1, "history": 1}
    assert stats["sessions"] == 2


async def test_the_update_stream_stays_open_and_is_counted(
    standin: tuple[aiohttp.ClientSession, str],
) -> None:
    http, url = standin
    async with AgentctlClient(http, url, "token").updates(after=0), http.get(url + STATS_PATH) as answer:
        assert (await answer.json())["open_streams"] == 1


async def test_an_unsigned_call_is_refused_as_agentctl_would(
    standin: tuple[aiohttp.ClientSession, str],
) -> None:
    http, url = standin
    for headers in ({}, {"Authorization": "Bearer token"}):
        async with http.get(url + STATUS.path, headers=headers) as answer:
            assert answer.status == 401
            assert (await answer.json())["error"] == "unauthorized"


async def test_a_journal_is_served_in_pages_bounded_in_entries_and_bytes() -> None:
    journal = Journal(entries=25, entry_bytes=1024 * 1024, page_entries=10)
    async with TestServer(build_app(journal)) as server, aiohttp.ClientSession() as http:
        client = AgentctlClient(http, str(server.make_url("")).rstrip("/"), "token")
        assert (await client.status()).last_seq == 25
        seen: list[int] = []
        after: int | None = 0
        while after is not None:
            page = await client.history(after)
            assert page.last_seq == 25
            assert 1 <= len(page.updates) <= 10
            assert sum(len(journal.entry(e.seq)) for e in page.updates) <= HISTORY_PAGE_BYTES
            seen += [e.seq for e in page.updates]
            after = page.next
            assert after is None or after == seen[-1]
        assert seen == list(range(1, 26))
        small = Journal(entries=25, entry_bytes=100, page_entries=10)
        assert [json.loads(small.page(after, None))["next"] for after in (0, 10, 20)] == [10, 20, None]
