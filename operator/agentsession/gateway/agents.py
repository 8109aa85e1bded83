"""The gateway's core: one runtime per AgentSession, fed by the watch cache and by agentctl, fanned out to clients.

A runtime owns the upstream update stream of its agent (opened while AgentctlReady is True) and the live
state that stream reveals (turn running, current mode). Status changes are computed by `status.agent_info`
from the cached object and that live state, so every replica reports the same thing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from agentsession.agentctl_client import AgentctlApi, AgentctlConnector, AgentctlError
from agentsession.api.manifest import Key, Manifest
from agentsession.api.views import SessionView
from agentsession.contract.live_state import LiveState, after_entry
from agentsession.contract.wire import StatusResponse
from agentsession.gateway.codec import utf8_size
from agentsession.gateway.events import (
    AgentctlReady,
    AgentRemoved,
    AgentStatusChanged,
    AgentUpdate,
    ErrorCode,
    Event,
    RequestError,
    ShellOutput,
)
from agentsession.gateway.status import agent_id, agent_info, cluster_state
from agentsession.gateway.upstream import (
    SHELL_INPUT_BYTES,
    SHELL_QUEUE_BYTES,
    JournalPosition,
    ShellStream,
    UpdateStream,
)
from agentsession.gateway.watch_cache import SessionCache
from agentsession.kube.client import Kube
from agentsession.kube.errors import KubeError
from agentsession.kube.resources import AGENT_SESSIONS
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)


class Subscriber(Protocol):
    """A client connection as the registry sees it."""

    def deliver(self, event: Event) -> None: ...

    def may_see(self, namespace: str) -> bool | None:
        """True/False if known, None if this connection has not been authorized for the namespace yet."""

    async def authorize_namespace(self, namespace: str) -> bool: ...

    def wants_updates(self, agent_id: str) -> bool: ...


def split_id(value: str) -> Key:
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name:
        raise RequestError(
            ErrorCode.VALIDATION_ERROR, f"agent id {value!r} must be 'namespace/name'", field="agentId"
        )
    return namespace, name


def _patch_failed(verb: str, key: Key, error: KubeError) -> RequestError:
    """The client's error for a patch the API server refused: its status, not the request the gateway made."""
    log.warning("cannot %s %s: %s", verb, agent_id(*key), error)
    said = f" (the API server answered {error.status} {error.reason})" if error.status else ""
    return RequestError(
        ErrorCode.UPSTREAM_ERROR, f"cannot {verb} {agent_id(*key)} right now{said}; retry later"
    )


def _behind_journal(status: StatusResponse, delivered: JournalPosition) -> bool:
    """Whether agentctl wrote `status` before the last journal entry already delivered from the same journal."""
    return (
        delivered.seq is not None
        and status.journal_id == delivered.journal_id
        and status.last_seq < delivered.seq
    )


@dataclass
class Runtime:
    key: Key
    live: LiveState = field(default_factory=LiveState)
    client: AgentctlApi | None = None
    stream: UpdateStream | None = None
    endpoint_key: tuple[str, str] | None = None  # (endpoint, podUID) the stream follows
    # Survives stream restarts: the journal lives on the workspace and outlives agentctl restarts.
    position: JournalPosition = field(default_factory=JournalPosition)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    last_published: tuple[dict[str, Any], dict[str, Any]] | None = None  # (info, cluster state)
    shell: ShellStream | None = None
    shell_subscribers: set[Subscriber] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Reads of agentctl's status, numbered as asked: the last applied one's number (see `_read_status`).
    status_asked: int = 0
    status_applied: int = 0

    @property
    def id(self) -> str:
        return agent_id(*self.key)


class AgentRegistry:
    def __init__(
        self,
        cache: SessionCache,
        kube: Kube,
        agentctl: AgentctlConnector,
        token_of: Callable[[str, str], str],
        *,
        agentctl_host_override: str | None = None,
        agentctl_port_override: int | None = None,
        init_timeout: float = 120.0,
        shell_input_bytes: int = SHELL_INPUT_BYTES,
        shell_queue_bytes: int = SHELL_QUEUE_BYTES,
    ) -> None:
        self.cache = cache
        self.kube = kube
        self.agentctl = agentctl
        # Derived from the release key, as the operator derives what it writes into the pod's Secret: the gateway
        # reads no Secret.
        self._token_of = token_of
        self._host_override = agentctl_host_override
        self._port_override = agentctl_port_override
        self.init_timeout = init_timeout
        self.shell_input_bytes = shell_input_bytes
        self.shell_queue_bytes = shell_queue_bytes
        self.runtimes: dict[Key, Runtime] = {}
        self.subscribers: set[Subscriber] = set()
        self._inits: dict[Key, asyncio.Task[None]] = {}
        self._tasks = Supervisor("agent registry", log)
        cache.add_listener(self._on_session)

    # --- lifecycle ---

    async def close(self) -> None:
        await self._tasks.close()
        for rt in self.runtimes.values():
            if rt.stream:
                await rt.stream.stop()
            if rt.shell:
                await rt.shell.stop()

    # --- views ---

    def info(self, key: Key) -> dict[str, Any] | None:
        obj = self.cache.get(key)
        if obj is None:
            return None
        rt = self.runtimes.get(key)
        return agent_info(obj, rt.live if rt and rt.connected.is_set() else None)

    def infos(self, namespaces: Callable[[str], bool]) -> list[dict[str, Any]]:
        result = []
        for obj in self._visible(namespaces):
            info = self.info((obj["metadata"]["namespace"], obj["metadata"]["name"]))
            if info is not None:
                result.append(info)
        return result

    def cluster_states(self, namespaces: Callable[[str], bool]) -> dict[str, dict[str, Any]]:
        """`status.cluster_state` of each visible session, by agent id."""
        return {
            agent_id(obj["metadata"]["namespace"], obj["metadata"]["name"]): cluster_state(obj)
            for obj in self._visible(namespaces)
        }

    def _visible(self, namespaces: Callable[[str], bool]) -> list[Manifest]:
        return sorted(
            (o for o in self.cache.items() if namespaces(o["metadata"]["namespace"])),
            key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]),
        )

    def session(self, key: Key) -> Manifest:
        obj = self.cache.get(key)
        if obj is None:
            raise RequestError(
                ErrorCode.NOT_FOUND, f"no AgentSession {key[0]}/{key[1]}", agentId=agent_id(*key)
            )
        return obj

    # --- fan-out ---

    def broadcast(self, namespace: str, event: Event, *, updates_of: str | None = None) -> None:
        for sub in list(self.subscribers):
            if updates_of is not None and not sub.wants_updates(updates_of):
                continue
            visible = sub.may_see(namespace)
            if visible is None:
                self._tasks.spawn(self._deliver_after_check(sub, namespace, event), "authorize, then deliver")
            elif visible:
                sub.deliver(event)

    async def _deliver_after_check(self, sub: Subscriber, namespace: str, event: Event) -> None:
        if await sub.authorize_namespace(namespace) and sub in self.subscribers:
            sub.deliver(event)

    def _publish_status(self, rt: Runtime, observed_at: float) -> None:
        info = self.info(rt.key)
        obj = self.cache.get(rt.key)
        if info is None or obj is None:
            return
        # A new phase or condition reason is news too, though the lifecycle status may stay `initializing`.
        published = (info, cluster_state(obj))
        if published == rt.last_published:
            return
        rt.last_published = published
        self.broadcast(rt.key[0], AgentStatusChanged(rt.id, info, observed_at, published[1]))

    # --- watch events ---

    def _on_session(self, kind: str, old: Manifest | None, new: Manifest) -> None:
        now = time.monotonic()
        key = (new["metadata"]["namespace"], new["metadata"]["name"])
        if kind == "DELETED":
            rt = self.runtimes.pop(key, None)
            info = agent_info({**new, "metadata": {**new["metadata"], "deletionTimestamp": "deleted"}}, None)
            self.broadcast(key[0], AgentRemoved(agent_id(*key), info, now))
            if rt:
                self._tasks.spawn(self._stop_runtime(rt), f"stop {rt.id}")
            return
        rt = self.runtimes.setdefault(key, Runtime(key))
        session = SessionView(new)
        was_ready = old is not None and SessionView(old).condition_true("AgentctlReady")
        if session.condition_true("AgentctlReady") and not was_ready:
            self.broadcast(key[0], AgentctlReady(rt.id, session.status.podUID, now))
        self._tasks.spawn(self._converge_upstream(rt), f"follow {rt.id}")
        was_initialized = old is not None and SessionView(old).condition_true("AgentInitialized")
        if session.condition_true("AgentInitialized") and not was_initialized:
            # The operator writes AgentctlReady before it starts ACP: what agentctl said then is out of date, and
            # so is an agent's exit it reported before its ACP session was resumed (the agent restarted).
            if rt.live.agent_state == "error":
                rt.live = replace(rt.live, agent_state=None, last_error=None)
            self._tasks.spawn(self._refresh_live(rt), f"refresh {rt.id}")
        self._publish_status(rt, now)

    async def _refresh_live(self, rt: Runtime) -> None:
        async with rt.lock:
            client = rt.client
        if client is None:
            return
        try:
            await self._read_status(rt, client)
        except AgentctlError as exc:
            # The update stream reads the status again when it reconnects.
            log.info("cannot refresh the agent state of %s: %s", rt.id, exc)

    async def _read_status(self, rt: Runtime, client: AgentctlApi) -> StatusResponse:
        """agentctl's status, which becomes the live state unless the answer to a later read came first.

        The update stream's read (at its connection) and a refresh (when the agent is initialized) can be in flight
        at once and answer out of order: the older answer ("starting") would otherwise stay the live state of a
        running agent, which clients would see as initializing until the stream next reconnects. Likewise a status
        from before journal entries the stream has delivered (a turn running, then its end) is older than them."""
        rt.status_asked += 1
        asked = rt.status_asked
        status = await client.status()
        current = self.runtimes.get(rt.key) is rt and rt.client is client
        if current and asked > rt.status_applied and not _behind_journal(status, rt.position):
            rt.status_applied = asked
            self._on_agentctl_status(rt, status)
        return status

    def _endpoint(self, session: SessionView) -> str | None:
        endpoint = session.status.agentctlEndpoint
        if not endpoint or not session.condition_true("AgentctlReady"):
            return None
        if self._host_override or self._port_override:
            host = self._host_override or session.status.podIP
            port = self._port_override or int(endpoint.rsplit(":", 1)[1])
            return f"http://{host}:{port}"
        return endpoint

    async def _converge_upstream(self, rt: Runtime) -> None:
        async with rt.lock:
            obj = self.cache.get(rt.key)
            session = SessionView(obj) if obj is not None else None
            endpoint = self._endpoint(session) if session is not None else None
            wanted = (endpoint, str(session.status.podUID)) if session is not None and endpoint else None
            if wanted == rt.endpoint_key:
                return
            await self._stop_streams(rt)
            rt.endpoint_key = None
            if wanted is None or endpoint is None or session is None:
                return
            token = self._token_of(session.namespace, session.ref.children)
            client = rt.client = self.agentctl(endpoint, token)
            rt.stream = UpdateStream(
                client,
                rt.position,
                on_entry=lambda entry: self._on_entry(rt, entry),
                read_status=lambda: self._read_status(rt, client),
                on_connected=lambda up: self._on_connected(rt, up),
            )
            rt.stream.start()
            rt.endpoint_key = wanted

    async def _stop_streams(self, rt: Runtime) -> None:
        if rt.stream:
            await rt.stream.stop()
            rt.stream = None
        if rt.shell:
            await rt.shell.stop()
            rt.shell = None
            for sub in list(rt.shell_subscribers):
                sub.deliver(ShellOutput(rt.id, "exit", "", None, time.monotonic()))
            rt.shell_subscribers.clear()
        rt.connected.clear()
        rt.live = LiveState()

    async def _stop_runtime(self, rt: Runtime) -> None:
        async with rt.lock:
            await self._stop_streams(rt)

    # --- upstream events ---

    def _on_agentctl_status(self, rt: Runtime, status: StatusResponse) -> None:
        rt.live = LiveState(
            agent_state=status.state,
            turn_running=status.acp.turn_running,
            last_error=status.last_error,
            current_mode_id=status.acp.current_mode_id or rt.live.current_mode_id,
        )
        self._publish_status(rt, time.monotonic())

    def _on_connected(self, rt: Runtime, up: bool) -> None:
        if up:
            rt.connected.set()
        else:
            rt.connected.clear()
        self._publish_status(rt, time.monotonic())

    def _on_entry(self, rt: Runtime, entry: Manifest) -> None:
        now = time.monotonic()
        kind = str(entry.get("kind", ""))
        notification = entry.get("notification") or {}
        live = after_entry(rt.live, kind, notification)
        event = AgentUpdate(
            rt.id, int(entry["seq"]), str(entry.get("timestamp", "")), kind, notification, now
        )
        # A turn's first update is preceded by its status change, and its last one by nothing after it.
        if live.turn_running and not rt.live.turn_running:
            rt.live = live
            self._publish_status(rt, now)
            self.broadcast(rt.key[0], event, updates_of=rt.id)
            return
        self.broadcast(rt.key[0], event, updates_of=rt.id)
        rt.live = live
        self._publish_status(rt, now)

    # --- requests ---

    def runtime(self, key: Key) -> Runtime:
        self.session(key)
        return self.runtimes.setdefault(key, Runtime(key))

    async def ready_client(self, key: Key) -> AgentctlApi:
        agentctl_ready = SessionView(self.session(key)).condition_true("AgentctlReady")
        rt = self.runtime(key)
        if agentctl_ready and rt.client is None:
            # Readiness is announced as soon as the watch shows it; the client may ask before we converged.
            await self._converge_upstream(rt)
        if not agentctl_ready or rt.client is None:
            raise RequestError(
                ErrorCode.AGENTCTL_NOT_READY,
                f"agentctl of {agent_id(*key)} is not ready yet; wait for its readiness notification",
                agentId=agent_id(*key),
            )
        return rt.client

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

    async def suspend(self, key: Key) -> None:
        """Asks the operator to suspend the session (`spec.suspend`); resuming is `start_and_wait`."""
        if SessionView(self.session(key)).deleting:
            raise RequestError(ErrorCode.CONFLICT, f"{agent_id(*key)} is being deleted")
        try:
            await self.kube.patch(AGENT_SESSIONS, key[0], key[1], {"spec": {"suspend": True}})
        except KubeError as exc:
            raise _patch_failed("suspend", key, exc) from exc

    async def _start_and_wait(self, key: Key) -> None:
        session = SessionView(self.session(key))
        if session.deleting:
            raise RequestError(ErrorCode.CONFLICT, f"{agent_id(*key)} is being deleted")
        if session.suspended:
            try:
                await self.kube.patch(AGENT_SESSIONS, key[0], key[1], {"spec": {"suspend": False}})
            except KubeError as exc:
                raise _patch_failed("resume", key, exc) from exc

        def ready(current: Manifest | None) -> bool:
            if current is None:
                return True
            view = SessionView(current)
            return (
                not view.suspended
                and view.condition_true("AgentctlReady")
                and view.condition_true("AgentInitialized")
            ) or view.status.phase == "Failed"

        try:
            current = await self.cache.wait_for(key, ready, self.init_timeout)
        except TimeoutError:
            last = self.cache.get(key)
            summary = SessionView(last).condition("Ready") if last is not None else None
            reason = summary.message if summary is not None else "no status yet"
            raise RequestError(
                ErrorCode.TIMEOUT,
                f"{agent_id(*key)} did not become ready within {self.init_timeout:.0f}s: {reason}",
            ) from None
        if current is None:
            raise RequestError(ErrorCode.NOT_FOUND, f"{agent_id(*key)} was deleted while starting")
        failed = SessionView(current)
        if failed.status.phase == "Failed":
            summary = failed.condition("Ready")
            raise RequestError(
                ErrorCode.CONFLICT,
                f"{agent_id(*key)} failed: {summary.message if summary else 'no reason given'}",
            )
        rt = self.runtime(key)
        await self._converge_upstream(rt)
        try:
            async with asyncio.timeout(self.init_timeout):
                await rt.connected.wait()
        except TimeoutError:
            raise RequestError(
                ErrorCode.UPSTREAM_ERROR, f"cannot open the update stream of {agent_id(*key)}"
            ) from None

    # --- shell ---

    async def shell_subscribe(self, key: Key, sub: Subscriber) -> str:
        client = await self.ready_client(key)
        rt = self.runtime(key)
        if rt.shell is None:
            shell = ShellStream(
                client, lambda frame: self._on_shell(rt, frame), queue_bytes=self.shell_queue_bytes
            )
            rt.shell = shell
            try:
                await shell.start()
            except TimeoutError:
                await shell.stop()
                rt.shell = None
                raise RequestError(ErrorCode.UPSTREAM_ERROR, "agentctl's shell stream did not open") from None
        rt.shell_subscribers.add(sub)
        return (await client.shell_buffer()).buffer

    async def shell_unsubscribe(self, key: Key, sub: Subscriber) -> None:
        rt = self.runtimes.get(key)
        if rt is None:
            return
        rt.shell_subscribers.discard(sub)
        if rt.shell is not None:
            rt.shell.release(sub)
        if not rt.shell_subscribers and rt.shell is not None:
            shell, rt.shell = rt.shell, None
            await shell.stop()

    async def shell_input(self, key: Key, data: str, sender: Subscriber) -> None:
        size = utf8_size(data)
        if size > self.shell_input_bytes:
            raise RequestError(
                ErrorCode.VALIDATION_ERROR,
                f"shell input of {size} bytes is longer than the {self.shell_input_bytes} one message may "
                "carry; send it in pieces, one after the other",
                field="data",
            )
        await self.ready_client(key)
        rt = self.runtime(key)
        if rt.shell is None:
            raise RequestError(ErrorCode.CONFLICT, "subscribe to the shell before sending input")
        await rt.shell.send_input(data, sender)

    def _on_shell(self, rt: Runtime, frame: Manifest) -> None:
        event = ShellOutput(
            rt.id, str(frame.get("type")), str(frame.get("data") or ""), frame.get("code"), time.monotonic()
        )
        for sub in list(rt.shell_subscribers):
            sub.deliver(event)

    def shells_of(self, sub: Subscriber) -> list[Key]:
        """The sessions whose shell `sub` watches."""
        return [key for key, rt in self.runtimes.items() if sub in rt.shell_subscribers]

    def forget(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        for rt in self.runtimes.values():
            if sub in rt.shell_subscribers:
                self._tasks.spawn(self.shell_unsubscribe(rt.key, sub), f"leave the shell of {rt.id}")
