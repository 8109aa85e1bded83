from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentsession.agentctl.journal import Journal
from agentsession.api.acp import config_option_modes, mode_config_option
from agentsession.api.models import AgentSessionStatus, Condition
from agentsession.contract.wire import StatusResponse
from agentsession.controller.durations import parse_duration
from agentsession.controller.idle import seconds_until_idle
from agentsession.controller.transitions import status_events
from agentsession.controller.watch_health import WatchHealth
from agentsession.controller.work_queue import WorkQueue

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("1h30m", 5400), ("250ms", 0.25), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "1d", "one hour", "1h 30m"])
def test_bad_durations_name_the_input(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def _status(phase: str, **pairs: tuple[str, str]) -> AgentSessionStatus:
    return AgentSessionStatus(
        phase=phase,  # type: ignore[arg-type]
        conditions=[
            Condition(type=kind, status=status, reason=reason, message=f"{kind} msg", lastTransitionTime=T0)  # type: ignore[arg-type]
            for kind, (status, reason) in pairs.items()
        ],
    )


def test_events_tell_phase_changes_and_new_warnings_once() -> None:
    pending = _status("Pending", PodScheduled=("False", "Pending"), Ready=("False", "Pending"))
    starting = _status("Starting", AgentctlReady=("False", "Starting"), Ready=("False", "Starting"))
    probing = _status("Starting", AgentctlReady=("False", "ProbeFailing"), Ready=("False", "ProbeFailing"))
    ready = _status("Ready", AgentctlReady=("True", "ProbeSucceeded"), Ready=("True", "Ready"))
    assert [(e.type, e.reason, e.message) for e in status_events(AgentSessionStatus(), pending)] == [
        ("Normal", "Pending", "Pending: Ready msg")
    ]
    assert [(e.type, e.reason) for e in status_events(pending, starting)] == [("Normal", "Starting")]
    # No phase change, one new warning, told once although two conditions carry it.
    assert [(e.type, e.reason, e.message) for e in status_events(starting, probing)] == [
        ("Warning", "ProbeFailing", "AgentctlReady: AgentctlReady msg")
    ]
    assert [(e.type, e.reason) for e in status_events(probing, ready)] == [("Normal", "Ready")]
    assert status_events(ready, ready) == []
    failed = _status(
        "Failed", AgentctlReady=("False", "CrashLoopBackOff"), Ready=("False", "CrashLoopBackOff")
    )
    assert [(e.type, e.reason) for e in status_events(ready, failed)] == [("Warning", "CrashLoopBackOff")]


def test_watch_health_flags_only_lasting_disagreement() -> None:
    health = WatchHealth(stall_seconds=30)
    health.record(("ns", "a"), "5")
    assert health.stalled({("ns", "a"): "5"}, now=0) == []
    # The API has moved on; the watch has not told us yet: tolerated for the window.
    assert health.stalled({("ns", "a"): "6"}, now=10) == []
    assert health.stalled({("ns", "a"): "6"}, now=35) == []
    assert health.stalled({("ns", "a"): "6"}, now=41) == [("ns", "a")]
    health.record(("ns", "a"), "6")
    assert health.stalled({("ns", "a"): "6"}, now=42) == []


async def test_work_queue_coalesces_and_serialises_per_key() -> None:
    running = 0
    peak = 0
    calls: list[str] = []
    release = asyncio.Event()
    three_done = asyncio.Event()

    async def reconcile(namespace: str, name: str) -> float | None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        calls.append(name)
        await release.wait()
        running -= 1
        if len(calls) == 3 and running == 0:
            three_done.set()
        return None

    queue = WorkQueue(reconcile)
    queue.trigger(("ns", "a"))
    queue.trigger(("ns", "b"))
    await asyncio.sleep(0)
    assert calls == ["a", "b"]
    for _ in range(4):
        queue.trigger(("ns", "a"))
    release.set()
    async with asyncio.timeout(5):
        await three_done.wait()
    # The four triggers that came while "a" ran became one more run, never a parallel one.
    assert calls == ["a", "b", "a"]
    assert peak == 2
    await queue.shutdown()


async def test_work_queue_bounds_how_many_sessions_reconcile_at_once() -> None:
    running = peak = 0
    release, all_done = asyncio.Event(), asyncio.Event()
    finished: list[str] = []

    async def reconcile(namespace: str, name: str) -> float | None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        finished.append(name)
        if len(finished) == 5:
            all_done.set()
        return None

    queue = WorkQueue(reconcile, concurrency=2)
    for name in "abcde":
        queue.trigger(("ns", name))
    for _ in range(5):
        await asyncio.sleep(0)
    assert running == 2
    release.set()
    async with asyncio.timeout(5):
        await all_done.wait()
    assert peak == 2
    assert sorted(finished) == list("abcde")
    await queue.shutdown()


async def test_work_queue_retries_failures_with_backoff() -> None:
    attempts = 0
    done = asyncio.Event()

    async def reconcile(namespace: str, name: str) -> float | None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RuntimeError("API down")
        done.set()
        return None

    queue = WorkQueue(reconcile)
    queue.trigger(("ns", "a"))
    async with asyncio.timeout(10):
        await done.wait()
    assert attempts == 2
    await queue.shutdown()


async def test_a_stopping_work_queue_lets_the_reconciles_under_way_end_and_starts_none() -> None:
    started: list[str] = []
    finished: list[str] = []
    release = asyncio.Event()

    async def reconcile(namespace: str, name: str) -> float | None:
        started.append(name)
        await release.wait()
        # What a reconcile does after its create: the Event that says so.
        await asyncio.sleep(0)
        finished.append(name)
        return 30.0  # a requeue, which a stopping queue drops

    queue = WorkQueue(reconcile, shutdown_grace=5.0)
    queue.trigger(("ns", "a"))
    await asyncio.sleep(0)
    stopping = asyncio.create_task(queue.shutdown())
    await asyncio.sleep(0)
    queue.trigger(("ns", "b"))
    queue.trigger(("ns", "a"))
    # The reconcile ends a while after the stop began: the queue waits for it.
    asyncio.get_running_loop().call_later(0.2, release.set)
    async with asyncio.timeout(5):
        await stopping
    assert started == ["a"]
    assert finished == ["a"]


async def test_a_stopping_work_queue_cancels_a_reconcile_that_outlasts_the_grace_period() -> None:
    cancelled = asyncio.Event()

    async def reconcile(namespace: str, name: str) -> float | None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return None

    queue = WorkQueue(reconcile, shutdown_grace=0.05)
    queue.trigger(("ns", "a"))
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await queue.shutdown()
    assert cancelled.is_set()


def _report(turn: bool = False, pending: int = 0, last: str = "2026-01-01T00:00:00.000Z") -> StatusResponse:
    return StatusResponse.model_validate(
        {
            "state": "running",
            "acp": {"turn_running": turn},
            "pending_permissions": pending,
            "last_activity_at": last,
        }
    )


@pytest.mark.parametrize(
    ("report", "seconds_later", "remaining"),
    [
        (_report(), 10, 50),
        (_report(), 60, 0),
        (_report(), 600, 0),
        (_report(turn=True), 600, 60),
        (_report(pending=1), 600, 60),
    ],
)
def test_seconds_until_idle(report: StatusResponse, seconds_later: int, remaining: float) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds_later)
    assert seconds_until_idle(60, report, now) == remaining


def test_journal_identity_lives_and_dies_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.append("session_update", {"n": 1})
    first_id = journal.id
    journal.close()
    with path.open("a") as f:
        f.write('{"seq": 2, "timest')  # a crash mid-append

    reopened = Journal(path)
    assert reopened.id == first_id
    assert reopened.last_seq == 1
    assert reopened.append("turn_end", {}).seq == 2
    reopened.close()

    path.unlink()  # a fresh workspace: same place, another journal
    fresh = Journal(path)
    assert fresh.id != first_id
    assert fresh.last_seq == 0
    fresh.close()


def test_grouped_mode_option_values_are_modes_in_their_order() -> None:
    options = [
        {"id": "mode", "name": "Switch", "category": "mode", "type": "boolean", "currentValue": True},
        {"id": "approval", "name": "Mode", "category": "mode", "type": "select", "currentValue": "auto",
         "options": [
             {"group": "safe", "name": "Safe", "options": [{"value": "read-only", "name": "Read only"}]},
             {"group": "open", "name": "Open", "options": [
                 {"value": "auto", "name": "Auto", "description": "edits without asking"},
                 {"value": 7, "name": "not a value"},
             ]},
         ]},
    ]  # fmt: skip
    option = mode_config_option(options)
    assert option is not None
    assert option["id"] == "approval"  # a boolean cannot hold a mode
    modes = config_option_modes(option)
    assert [(m.id, m.name, m.description) for m in modes] == [
        ("read-only", "Read only", None),
        ("auto", "Auto", "edits without asking"),
    ]


def test_a_spec_that_does_not_parse_is_named_by_its_field() -> None:
    from pydantic import ValidationError

    from agentsession.api.models import AgentSessionSpec
    from agentsession.controller.reconciler import _spec_problem

    with pytest.raises(ValidationError) as caught:
        AgentSessionSpec.model_validate({"agent": {"type": "nope", "env": [{"name": 5}]}, "suspend": "x"})
    problem = _spec_problem(caught.value)
    assert problem.startswith("spec.agent.type: Input should be")
    assert problem.endswith("(and 2 more)")
