"""Runs reconciles one at a time per session, coalescing triggers, with delayed requeues.

kopf handlers only trigger; this queue makes sure that a burst of pod and session events becomes at most
one running reconcile plus one queued reconcile per session, so the operator never races itself.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from agentsession.api.manifest import Key
from agentsession.tasks import Supervisor

ReconcileFn = Callable[[str, str], Awaitable[float | None]]

log = logging.getLogger(__name__)
MAX_BACKOFF_SECONDS = 60.0
# How long a stopping operator lets the reconciles under way end. One cut short between creating a pod and posting
# its PodCreated Event leaves the pod to the next leader, which adopts it and has nothing to announce; a reconcile
# takes well under a second, and a leader that stops sooner hands its Lease over sooner.
SHUTDOWN_GRACE_SECONDS = 5.0


class WorkQueue:
    def __init__(
        self, reconcile: ReconcileFn, concurrency: int = 32, shutdown_grace: float = SHUTDOWN_GRACE_SECONDS
    ) -> None:
        self._reconcile = reconcile
        self._shutdown_grace = shutdown_grace
        self._closing = False
        # Different sessions reconcile concurrently, but a burst does not open a connection per session at once.
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks = Supervisor("reconcile", log)
        self._running: dict[Key, asyncio.Task[None]] = {}
        self._dirty: set[Key] = set()
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._failures: dict[Key, int] = {}

    def trigger(self, key: Key) -> None:
        if self._closing:
            return
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._running:
            self._dirty.add(key)
            return
        self._running[key] = self._tasks.spawn(self._run(key), f"{key[0]}/{key[1]}")

    def requeue(self, key: Key, delay: float) -> None:
        if self._closing or key in self._timers:
            return
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(delay, self._fire, key)

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.trigger(key)

    async def _run(self, key: Key) -> None:
        try:
            while True:
                self._dirty.discard(key)
                delay = await self._attempt(key)
                if key not in self._dirty or self._closing:
                    break
            if delay is not None:
                self.requeue(key, delay)
        finally:
            del self._running[key]

    async def _attempt(self, key: Key) -> float | None:
        try:
            async with self._slots:
                delay = await self._reconcile(*key)
        except asyncio.CancelledError:
            raise
        except Exception:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            backoff = min(MAX_BACKOFF_SECONDS, 2.0 ** min(failures, 6)) * random.uniform(0.8, 1.2)
            log.exception(
                "reconcile of %s/%s failed (attempt %d); retrying in %.1fs", *key, failures, backoff
            )
            return backoff
        self._failures.pop(key, None)
        return delay

    async def shutdown(self) -> None:
        """Takes no more work, lets the reconciles under way end for up to the grace period, then cancels the rest."""
        self._closing = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        running = list(self._running.values())
        if running:
            _, cut_short = await asyncio.wait(running, timeout=self._shutdown_grace)
            if cut_short:
                log.warning(
                    "stopping with %d reconciles still running; the next leader finishes them", len(cut_short)
                )
        await self._tasks.close()
