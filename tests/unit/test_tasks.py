"""Supervisor: named background tasks, kept alive, a failure logged once, cancelled and awaited on close."""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentsession.tasks import Supervisor

LOGGER = "tests.supervisor"


@pytest.fixture
def supervisor() -> Supervisor:
    return Supervisor("bridge", logging.getLogger(LOGGER))


@pytest.fixture
async def loop_reports() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the loop's exception handler: asyncio's own "never retrieved" and "destroyed" reports."""
    reports: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reports.append(context))
    yield reports
    loop.set_exception_handler(None)


async def test_tasks_are_named_after_owner_and_counted_while_they_run(supervisor: Supervisor) -> None:
    release = asyncio.Event()
    task = supervisor.spawn(release.wait(), "turn")
    assert task.get_name() == "bridge: turn"
    assert len(supervisor) == 1
    release.set()
    await task
    assert len(supervisor) == 0


async def test_a_task_nobody_else_holds_is_not_collected(
    supervisor: Supervisor, loop_reports: list[dict[str, Any]]
) -> None:
    async def wait_on_own_event() -> None:
        # Only the task itself reaches this event: without the supervisor, the task is garbage.
        await asyncio.Event().wait()

    held = weakref.ref(supervisor.spawn(wait_on_own_event(), "orphan"))
    await asyncio.sleep(0)  # it runs up to its wait
    gc.collect()
    assert held() is not None
    assert loop_reports == []
    await supervisor.close()


async def test_a_failure_is_logged_once_with_the_task_name(
    supervisor: Supervisor, caplog: pytest.LogCaptureFixture, loop_reports: list[dict[str, Any]]
) -> None:
    async def fail() -> None:
        raise ValueError("no luck")

    with caplog.at_level(logging.ERROR):
        task = supervisor.spawn(fail(), "watch")
        await asyncio.wait({task})  # waits without retrieving the exception
        del task
        gc.collect()

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.getMessage()) for r in errors] == [(LOGGER, "background task 'bridge: watch' failed")]
    assert errors[0].exc_info is not None
    assert isinstance(errors[0].exc_info[1], ValueError)
    # Retrieved by the supervisor: asyncio does not report it a second time when the task is collected.
    assert loop_reports == []
    assert len(supervisor) == 0


async def test_a_cancelled_task_is_no_failure(
    supervisor: Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        task = supervisor.spawn(asyncio.sleep(3600), "idle")
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.wait({task})
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert len(supervisor) == 0


async def test_close_cancels_every_task_and_waits_for_it_to_finish(supervisor: Supervisor) -> None:
    cleaned: list[str] = []

    async def work(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # clean-up that awaits: close() must wait for it, not only cancel
            cleaned.append(name)

    tasks = [supervisor.spawn(work(name), name) for name in ("a", "b")]
    await asyncio.sleep(0)  # both run up to their sleep
    await asyncio.wait_for(supervisor.close(), 5)
    assert sorted(cleaned) == ["a", "b"]
    assert all(task.cancelled() for task in tasks)
    assert len(supervisor) == 0


async def test_spawn_after_close_is_cancelled_and_never_runs(supervisor: Supervisor) -> None:
    await supervisor.close()
    ran: list[bool] = []

    async def late() -> None:
        ran.append(True)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = supervisor.spawn(late(), "late")
        await asyncio.wait({task})
        gc.collect()
    assert task.cancelled()
    assert ran == []
    assert len(supervisor) == 0
    assert [str(w.message) for w in caught] == []  # no "coroutine was never awaited"
