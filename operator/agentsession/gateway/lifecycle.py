"""Lifecycle requests: suspending a session and resuming it, by asking the operator through `spec.suspend`, and
waiting until a resumed session can serve."""

from __future__ import annotations

import asyncio
import logging

from agentsession.api.manifest import Key
from agentsession.gateway.events import ErrorCode, RequestError
from agentsession.gateway.live import AgentLinks
from agentsession.gateway.sessions import Session
from agentsession.gateway.status import agent_id
from agentsession.gateway.watch_cache import SessionCache
from agentsession.kube.client import Kube
from agentsession.kube.errors import KubeError
from agentsession.kube.resources import AGENT_SESSIONS

log = logging.getLogger(__name__)


def _patch_failed(verb: str, key: Key, error: KubeError) -> RequestError:
    """The client's error for a patch the API server refused: its status, not the request the gateway made."""
    log.warning("cannot %s %s: %s", verb, agent_id(*key), error)
    said = f" (the API server answered {error.status} {error.reason})" if error.status else ""
    return RequestError(
        ErrorCode.UPSTREAM_ERROR, f"cannot {verb} {agent_id(*key)} right now{said}; retry later"
    )


def _serving(session: Session | None, resumed_at: int) -> bool:
    """Whether a session resumed at generation `resumed_at` (0: not resumed) can serve, or never will (it is gone
    or failed). A status the operator wrote before it saw the resume does not count: written while it still drained
    and deleted the suspended pod, it says Ready for a pod about to go."""
    if session is None:
        return True
    view = session.view
    seen = view.status.observedGeneration
    if seen is not None and seen < resumed_at:
        return False
    ready = not view.suspended and session.agentctl_ready and session.initialized
    return ready or view.status.phase == "Failed"


class Lifecycle:
    def __init__(self, cache: SessionCache, kube: Kube, links: AgentLinks, init_timeout: float) -> None:
        self.cache = cache
        self.kube = kube
        self.links = links
        self.init_timeout = init_timeout
        self._inits: dict[Key, asyncio.Task[None]] = {}

    async def suspend(self, session: Session) -> None:
        """Asks the operator to suspend the session (`spec.suspend`); resuming is `start_and_wait`."""
        if session.view.deleting:
            raise RequestError(ErrorCode.CONFLICT, f"{session.id} is being deleted")
        await self._patch(session.key, "suspend", suspend=True)

    async def start_and_wait(self, key: Key) -> None:
        """Resumes a suspended session and waits until it can serve; concurrent callers share one wait."""
        task = self._inits.get(key)
        if task is None or task.done():
            task = asyncio.create_task(self._start_and_wait(key))
            self._inits[key] = task
            task.add_done_callback(lambda t: self._init_done(key, t))
        await asyncio.shield(task)

    def _init_done(self, key: Key, task: asyncio.Task[None]) -> None:
        if self._inits.get(key) is task:
            del self._inits[key]
        # Its waiters may all have gone (their clients left): how it ended was theirs to hear, not an error.
        if not task.cancelled():
            task.exception()

    async def _patch(self, key: Key, verb: str, *, suspend: bool) -> int:
        """Sets `spec.suspend`; answers the generation it made."""
        try:
            patched = await self.kube.patch(AGENT_SESSIONS, key[0], key[1], {"spec": {"suspend": suspend}})
        except KubeError as exc:
            raise _patch_failed(verb, key, exc) from exc
        return int((patched.get("metadata") or {}).get("generation") or 0)

    async def _start_and_wait(self, key: Key) -> None:
        session = self.cache.session(key)
        if session is None:
            raise RequestError(
                ErrorCode.NOT_FOUND, f"no AgentSession {key[0]}/{key[1]}", agentId=agent_id(*key)
            )
        if session.view.deleting:
            raise RequestError(ErrorCode.CONFLICT, f"{session.id} is being deleted")
        resumed_at = await self._patch(key, "resume", suspend=False) if session.view.suspended else 0
        try:
            current = await self.cache.wait_for(key, lambda s: _serving(s, resumed_at), self.init_timeout)
        except TimeoutError:
            last = self.cache.session(key)
            summary = last.view.condition("Ready") if last is not None else None
            reason = summary.message if summary is not None else "no status yet"
            raise RequestError(
                ErrorCode.TIMEOUT,
                f"{session.id} did not become ready within {self.init_timeout:.0f}s: {reason}",
            ) from None
        if current is None:
            raise RequestError(ErrorCode.NOT_FOUND, f"{session.id} was deleted while starting")
        if current.view.status.phase == "Failed":
            summary = current.view.condition("Ready")
            raise RequestError(
                ErrorCode.CONFLICT,
                f"{session.id} failed: {summary.message if summary else 'no reason given'}",
            )
        link = self.links.link(key)
        await self.links.converge(link)
        try:
            async with asyncio.timeout(self.init_timeout):
                await link.connected.wait()
        except TimeoutError:
            raise RequestError(
                ErrorCode.UPSTREAM_ERROR, f"cannot open the update stream of {session.id}"
            ) from None
