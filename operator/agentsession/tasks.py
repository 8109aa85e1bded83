"""Background tasks with an owner: named, cancelled together on shutdown, and a failure logged exactly once.

`asyncio.TaskGroup` cancels every sibling when one task fails, which is wrong for independent background
work (one agent's stream failing must not stop another's); a bare `create_task` loses the task to the garbage
collector and its exception to "Task exception was never retrieved". This keeps a strong reference until the
task ends, logs its exception once with the task's name, and cancels whatever is left on `close()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Supervisor:
    def __init__(self, owner: str, logger: logging.Logger | None = None) -> None:
        self._owner = owner
        self._log = logger or logging.getLogger(__name__)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Runs `coro` in the background; after `close()` the coroutine is closed unrun and the task cancelled."""
        task = asyncio.create_task(coro, name=f"{self._owner}: {name}")
        if self._closed:
            task.cancel()
            return task
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._log.error("background task %r failed", task.get_name(), exc_info=error)

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Cancels every running task and waits for them to finish; spawning afterwards is refused."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
