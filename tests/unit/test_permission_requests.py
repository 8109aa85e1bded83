"""agentctl's permission broker: a request is published and parked until a client answers it, the timeout
cancels it, the agent withdraws it, or agentctl cancels everything; each ends in exactly one resolved entry."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agentsession.agentctl.events import EventHub
from agentsession.agentctl.journal import Entry, Journal
from agentsession.agentctl.metrics import Metrics
from agentsession.agentctl.permissions import InvalidOption, PermissionBroker, UnknownPending

WAIT = 10.0
TOOL_CALL = {"toolCallId": "call-1", "title": "write README.md"}
OPTIONS = [{"optionId": "allow", "kind": "allow_once"}, {"optionId": "reject", "kind": "reject_once"}]


class World:
    def __init__(self, tmp_path: Path, timeout: float = 60.0) -> None:
        self.hub = EventHub(Journal(tmp_path / "journal.jsonl"))
        self.metrics = Metrics()
        self.broker = PermissionBroker(self.hub, timeout, self.metrics)
        self.published = self.hub.subscribe(frozenset({"permission_request"})).entries(None)

    def entries(self, kind: str) -> list[Entry]:
        return [json.loads(e.text) for e in self.hub.journal.entries() if e.kind == kind]

    def ask(self, session_id: str = "sess-1") -> asyncio.Task[dict[str, Any]]:
        return asyncio.create_task(self.broker.request(session_id, TOOL_CALL, OPTIONS))

    async def parked(self, count: int = 1) -> list[str]:
        """Waits until `count` more requests were published; the ids of all requests waiting now."""
        async with asyncio.timeout(WAIT):
            for _ in range(count):
                await anext(self.published)
        return [p["pending_id"] for p in self.broker.pending()]

    def seconds_waited(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "agentctl_permission_wait_seconds_sum", {"outcome": outcome}
        )
        return value or 0.0

    def waits_observed(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "agentctl_permission_wait_seconds_count", {"outcome": outcome}
        )
        return value or 0.0


async def _within(awaitable: Awaitable[Any]) -> Any:
    async with asyncio.timeout(WAIT):
        return await awaitable


async def test_a_request_is_published_with_when_it_expires(tmp_path: Path) -> None:
    world = World(tmp_path, timeout=90)
    task = world.ask("sess-9")
    (pending_id,) = await world.parked()

    (published,) = world.entries("permission_request")
    request = published["notification"]
    assert world.broker.pending() == [request]
    assert request["pending_id"] == pending_id
    assert len(pending_id) == 32  # a uuid4 in hex: not guessable from another request's id
    assert (request["session_id"], request["tool_call"], request["options"]) == ("sess-9", TOOL_CALL, OPTIONS)
    created = datetime.fromisoformat(request["created_at"])
    expires = datetime.fromisoformat(request["expires_at"])
    assert request["created_at"].endswith("Z")
    assert (expires - created).total_seconds() == 90
    assert not task.done()
    task.cancel()


async def test_answering_with_an_option_resolves_the_request_once(tmp_path: Path) -> None:
    world = World(tmp_path)
    started = time.monotonic()
    task = world.ask()
    (pending_id,) = await world.parked()

    assert world.broker.respond(pending_id, "reject", cancelled=False) == {
        "outcome": "selected",
        "optionId": "reject",
    }
    assert await _within(task) == {"outcome": "selected", "optionId": "reject"}
    assert (world.broker.count, world.broker.pending()) == (0, [])
    (resolved,) = world.entries("permission_resolved")
    assert resolved["notification"] == {
        "pending_id": pending_id,
        "session_id": "sess-1",
        "outcome": {"outcome": "selected", "optionId": "reject"},
        "reason": "responded",
    }
    assert (world.waits_observed("selected"), world.waits_observed("cancelled")) == (1, 0)
    assert 0 <= world.seconds_waited("selected") <= time.monotonic() - started
    with pytest.raises(UnknownPending, match=pending_id):
        world.broker.respond(pending_id, "allow", cancelled=False)
    assert len(world.entries("permission_resolved")) == 1


async def test_a_client_may_cancel_instead_of_choosing(tmp_path: Path) -> None:
    world = World(tmp_path)
    task = world.ask()
    (pending_id,) = await world.parked()
    assert world.broker.respond(pending_id, None, cancelled=True) == {"outcome": "cancelled"}
    assert await _within(task) == {"outcome": "cancelled"}
    (resolved,) = world.entries("permission_resolved")
    assert resolved["notification"]["reason"] == "responded"
    assert world.waits_observed("cancelled") == 1


@pytest.mark.parametrize("option", ["nope", None, ""])
async def test_an_option_the_request_did_not_offer_is_refused_and_the_request_stays(
    tmp_path: Path, option: str | None
) -> None:
    world = World(tmp_path)
    task = world.ask()
    (pending_id,) = await world.parked()
    with pytest.raises(InvalidOption) as refused:
        world.broker.respond(pending_id, option, cancelled=False)
    assert str(refused.value) == f"option_id {option!r} is not one of ['allow', 'reject']"
    assert world.broker.count == 1
    assert world.entries("permission_resolved") == []
    assert not task.done()
    world.broker.respond(pending_id, "allow", cancelled=False)
    assert await _within(task) == {"outcome": "selected", "optionId": "allow"}


async def test_an_unknown_request_says_which_id_it_did_not_find(tmp_path: Path) -> None:
    world = World(tmp_path)
    with pytest.raises(UnknownPending) as unknown:
        world.broker.respond("abc123", "allow", cancelled=False)
    assert "'abc123'" in str(unknown.value)
    assert isinstance(unknown.value, LookupError)


async def test_silence_until_the_timeout_cancels_the_request(tmp_path: Path) -> None:
    world = World(tmp_path, timeout=0.01)
    outcome = await _within(world.broker.request("sess-1", TOOL_CALL, OPTIONS))
    assert outcome == {"outcome": "cancelled"}
    assert world.broker.count == 0
    (resolved,) = world.entries("permission_resolved")
    assert resolved["notification"]["reason"] == "timeout"
    assert resolved["notification"]["outcome"] == {"outcome": "cancelled"}
    assert world.waits_observed("cancelled") == 1


async def test_an_agent_that_withdraws_its_request_leaves_it_cancelled(tmp_path: Path) -> None:
    world = World(tmp_path)
    task = world.ask()
    await world.parked()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await _within(task)
    assert world.broker.count == 0
    (resolved,) = world.entries("permission_resolved")
    assert (resolved["notification"]["reason"], resolved["notification"]["outcome"]) == (
        "withdrawn",
        {"outcome": "cancelled"},
    )


async def test_cancel_all_answers_every_waiting_request_with_its_reason(tmp_path: Path) -> None:
    world = World(tmp_path)
    tasks = [world.ask("sess-1"), world.ask("sess-2")]
    ids = await world.parked(2)
    world.broker.cancel_all("agent exited")
    assert await _within(asyncio.gather(*tasks)) == [{"outcome": "cancelled"}] * 2
    resolved = world.entries("permission_resolved")
    assert sorted(e["notification"]["pending_id"] for e in resolved) == sorted(ids)
    assert {e["notification"]["reason"] for e in resolved} == {"agent exited"}
    assert [e["notification"]["session_id"] for e in resolved] == ["sess-1", "sess-2"]
    world.broker.cancel_all("again")
    assert len(world.entries("permission_resolved")) == 2


async def test_an_answer_that_races_the_agent_withdrawing_resolves_once(tmp_path: Path) -> None:
    world = World(tmp_path)
    task = world.ask()
    (pending_id,) = await world.parked()
    # The agent gives up, and a client answers before the request has seen either.
    task.cancel()
    assert world.broker.respond(pending_id, "allow", cancelled=False) == {
        "outcome": "selected",
        "optionId": "allow",
    }
    with pytest.raises(asyncio.CancelledError):
        await _within(task)
    (resolved,) = world.entries("permission_resolved")
    assert resolved["notification"]["reason"] == "responded"
    assert world.broker.count == 0
