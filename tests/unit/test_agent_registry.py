"""The gateway's registry against the in-memory API server and agentctl: readiness, lazy start, fan-out of a
turn, agentctl restarts, pod replacement and deletion, each in milliseconds. The operator's part (writing the
status) is played by the test; the cluster tier proves the same on real parts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from agentsession.agentctl_client import AgentctlApi
from agentsession.api.constants import API_VERSION, KIND
from agentsession.api.models import AgentSessionStatus
from agentsession.contract.wire import StartRequest
from agentsession.gateway.agents import AgentRegistry
from agentsession.gateway.auth import Identity
from agentsession.gateway.connection import Connection
from agentsession.gateway.events import (
    AgentctlReady,
    AgentRemoved,
    AgentStatusChanged,
    AgentUpdate,
    ErrorCode,
    Event,
    RequestError,
)
from agentsession.gateway.lifecycle_dialect import LifecycleCodec
from agentsession.gateway.watch_cache import SessionCache
from agentsession.kube.resources import AGENT_SESSIONS
from agentsession.testing.fake_agentctl import FakeAgentctl, FakeAgentctlConnector, FakeTurn
from agentsession.testing.fake_kube import FakeKube
from tests.support.release_key import token_of

NS, NAME = "team", "s1"
KEY = (NS, NAME)
AGENT = f"{NS}/{NAME}"
T = "2026-01-01T12:00:00Z"


def endpoint(pod_ip: str) -> str:
    return f"http://{pod_ip}:9999"


def status(*, ready: bool, pod_uid: str = "pod-1", pod_ip: str = "10.0.0.7", phase: str | None = None,
           message: str = "", observed: int | None = None) -> dict[str, Any]:  # fmt: skip
    def condition(kind: str, true: bool) -> dict[str, Any]:
        reason = {True: "Ready", False: "Starting"}[true]
        return {
            "type": kind,
            "status": str(true),
            "reason": reason,
            "message": message,
            "lastTransitionTime": T,
        }

    return {
        "phase": phase or ("Ready" if ready else "Starting"),
        "conditions": [condition(k, ready) for k in ("AgentctlReady", "AgentInitialized", "Ready")],
        "podUID": pod_uid,
        "podIP": pod_ip,
        "agentctlEndpoint": endpoint(pod_ip) if ready else None,
        "acp": {"sessionId": "acp-1", "currentModeId": "code"} if ready else None,
        "observedGeneration": observed,
    }


def agentctl_ready_only(reason: str, **fields: Any) -> dict[str, Any]:
    """A ready session's status with only AgentctlReady True, the conditions after it False for `reason`;
    `fields` replace the status's own (e.g. the operator's first write, before ACP starts)."""
    written = {**status(ready=True), **fields}
    for condition in written["conditions"]:
        if condition["type"] != "AgentctlReady":
            condition.update(status="False", reason=reason)
    return written


class Client:
    """A connected client that may see everything and wants every update."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def deliver(self, event: Event) -> None:
        self.events.append(event)

    def may_see(self, namespace: str) -> bool | None:
        return True

    async def authorize_namespace(self, namespace: str) -> bool:
        return True

    def wants_updates(self, agent_id: str) -> bool:
        return True

    def statuses(self) -> list[str]:
        return [e.info["status"] for e in self.events if isinstance(e, AgentStatusChanged)]

    def phases(self) -> list[str | None]:
        return [e.cluster.get("phase") for e in self.events if isinstance(e, AgentStatusChanged)]

    def updates(self) -> list[int]:
        return [e.seq for e in self.events if isinstance(e, AgentUpdate)]


async def until(what: str, predicate: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110  (the predicates read state no single Event covers)
            await asyncio.sleep(0.005)
    assert predicate(), what


class Gateway:
    def __init__(self) -> None:
        self.kube = FakeKube()
        self.agentctls = FakeAgentctlConnector()
        self.cache = SessionCache(self.kube, [NS], inactivity_timeout=5, server_timeout=60)
        self.registry = AgentRegistry(self.cache, self.kube, self.agentctls, token_of, init_timeout=2.0)
        self.client = Client()
        self.registry.subscribers.add(self.client)

    def connected(self) -> bool:
        runtime = self.registry.links.runtimes.get(KEY)
        return runtime is not None and runtime.connected.is_set()

    def info(self) -> dict[str, Any]:
        return self.registry.info(self.registry.session(KEY))

    async def ready_client(self) -> AgentctlApi:
        return await self.registry.links.ready_client(self.registry.session(KEY))

    def agentctl(self, pod_ip: str = "10.0.0.7") -> FakeAgentctl:
        return self.agentctls.agent(endpoint(pod_ip))

    async def session(self, *, suspend: bool = False, **state: Any) -> None:
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": NAME, "namespace": NS},
                "spec": {"agent": {"type": "demo"}, "suspend": suspend}}  # fmt: skip
        await self.kube.create(body)
        if state:
            await self.operator_writes(**state)

    async def operator_writes(self, **state: Any) -> None:
        """Writes the status as the operator does: AgentInitialized only after its start call succeeded."""
        agentctl = self.agentctl(state.get("pod_ip", "10.0.0.7"))
        if state.get("ready") and agentctl.agent_state == "stopped":
            await agentctl.start(StartRequest())
        await self.kube.patch(AGENT_SESSIONS, NS, NAME, {"status": status(**state)}, status=True)


async def test_readiness_is_announced_and_the_update_stream_opened(gateway: Gateway) -> None:
    await gateway.session(ready=False)
    # One for the new object, maybe one for its first status: a phase change is news, the status stays.
    await until("initializing", lambda: set(gateway.client.statuses()) == {"initializing"})
    await gateway.operator_writes(ready=True)
    await until("ready", lambda: gateway.client.statuses()[-1:] == ["ready"])
    ready = [e for e in gateway.client.events if isinstance(e, AgentctlReady)]
    assert [(e.agent_id, e.task_session_id) for e in ready] == [(AGENT, "pod-1")]
    # The token derived from the release key, as the operator derives what it writes: no Secret is read.
    assert gateway.agentctls.connections[0] == (endpoint("10.0.0.7"), token_of(NS, NAME))
    assert gateway.kube.verbs("Secret") == []
    assert (await gateway.ready_client()).endpoint == endpoint("10.0.0.7")


async def test_a_new_phase_is_published_with_its_conditions_though_the_status_stays(gateway: Gateway) -> None:
    await gateway.session(ready=False, phase="Pending", message="waiting for the scheduler")
    await until("Pending", lambda: gateway.client.phases()[-1:] == ["Pending"])
    await gateway.operator_writes(ready=False, phase="Starting", message="agentctl is starting")
    await until("Starting", lambda: gateway.client.phases()[-1:] == ["Starting"])
    last = [e for e in gateway.client.events if isinstance(e, AgentStatusChanged)][-1]
    assert last.info["status"] == "initializing"
    ready = next(c for c in last.cluster["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["message"]) == ("Starting", "agentctl is starting")
    # The same status again is no news.
    count = len(gateway.client.phases())
    await gateway.operator_writes(ready=False, phase="Starting", message="agentctl is starting")
    await gateway.operator_writes(ready=True)
    await until("ready", lambda: gateway.client.statuses()[-1:] == ["ready"])
    assert gateway.client.phases()[count:][:1] == ["Ready"], "the repeated status was published again"


async def test_agentctl_ready_before_acp_starts_then_ready_once_it_has(gateway: Gateway) -> None:
    # The operator's first write: agentctl answers, ACP not started yet (the agent is still "stopped").
    first = agentctl_ready_only("Initializing", phase="Starting", acp=None)
    await gateway.session()
    await gateway.kube.patch(AGENT_SESSIONS, NS, NAME, {"status": first}, status=True)
    await until("connected", gateway.connected)
    assert gateway.client.statuses()[-1] == "initializing"
    # Then ACP starts and the operator writes AgentInitialized: what agentctl said at connection is out of date.
    await gateway.operator_writes(ready=True)
    await until("ready", lambda: gateway.client.statuses()[-1:] == ["ready"])


async def test_an_older_status_answering_last_does_not_undo_a_newer_one(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update stream's status read at its connection answers after the refresh that AgentInitialized
    brought: the agent it describes ("stopped") is older than the refresh's ("running")."""
    agentctl = gateway.agentctl()
    answered = agentctl.status
    release, asked = asyncio.Event(), []

    async def late_first_answer() -> Any:
        asked.append(True)
        answer = await answered()  # the state when asked
        if len(asked) == 1:
            await release.wait()
        return answer

    monkeypatch.setattr(agentctl, "status", late_first_answer)
    first = agentctl_ready_only("Initializing", phase="Starting", acp=None)
    await gateway.session()
    await gateway.kube.patch(AGENT_SESSIONS, NS, NAME, {"status": first}, status=True)
    await until("the stream's status read", lambda: len(asked) == 1)
    await gateway.operator_writes(ready=True)
    await until("the refresh's status read", lambda: len(asked) == 2)
    release.set()
    await until("connected", gateway.connected)
    await until("ready", lambda: gateway.info()["status"] == "ready")


async def test_a_status_from_before_the_journal_delivered_does_not_undo_it(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh (the agent initialized again) asks while a turn runs and answers after the stream delivered the
    turn's end: its "turn running" is older than that end."""
    await gateway.session(ready=True)
    await until("connected", gateway.connected)
    await until("ready", lambda: gateway.client.statuses()[-1:] == ["ready"])
    agentctl = gateway.agentctl()
    agentctl.turns.append(FakeTurn(hold=True))
    await agentctl.prompt("hello")
    await until("processing", lambda: gateway.client.statuses()[-1:] == ["processing"])
    answered = agentctl.status
    release = asyncio.Event()
    held: list[Any] = []
    returned: list[bool] = []

    async def answering_late() -> Any:
        held.append(await answered())  # the agent as it was when asked: in the turn
        await release.wait()
        returned.append(True)  # the registry applies (or not) the answer in the same step
        return held[-1]

    monkeypatch.setattr(agentctl, "status", answering_late)
    # The operator sees the agent restart and resume (AgentInitialized False, then True): the gateway refreshes.
    restarted = agentctl_ready_only("AgentRestarted")
    await gateway.kube.patch(AGENT_SESSIONS, NS, NAME, {"status": restarted}, status=True)
    await until("initializing", lambda: gateway.client.statuses()[-1:] == ["initializing"])
    await gateway.operator_writes(ready=True)
    await until("the refresh's status read", lambda: len(held) == 1)
    assert held[0].acp.turn_running
    agentctl.end_turn()
    await until("the turn's end delivered", lambda: gateway.client.statuses()[-1:] == ["ready"])
    release.set()
    await until("the late answer", lambda: bool(returned))
    assert gateway.info()["status"] == "ready"
    assert gateway.client.statuses()[-1] == "ready"


async def test_a_turn_is_fanned_out_between_processing_and_ready(gateway: Gateway) -> None:
    await gateway.session(ready=True)
    await until("ready", lambda: gateway.client.statuses()[-1:] == ["ready"])
    agentctl = gateway.agentctl()
    await until("stream open", lambda: gateway.connected())
    await (await gateway.ready_client()).prompt("hello")
    await until(
        "turn over", lambda: gateway.client.statuses()[-1:] == ["ready"] and bool(gateway.client.updates())
    )
    assert gateway.client.updates() == [e.seq for e in agentctl.journal]
    first_update = next(i for i, e in enumerate(gateway.client.events) if isinstance(e, AgentUpdate))
    processing = gateway.client.statuses().index("processing")
    assert isinstance(gateway.client.events[first_update - 1], AgentStatusChanged), "status change first"
    assert processing >= 0


async def test_an_agentctl_restart_resumes_the_stream_without_losing_or_repeating(gateway: Gateway) -> None:
    await gateway.session(ready=True)
    agentctl = gateway.agentctl()
    await until("stream open", lambda: gateway.connected())
    agentctl.append(
        "session_update", {"sessionId": "acp-1", "update": {"sessionUpdate": "agent_message_chunk"}}
    )
    await until("first entry", lambda: gateway.client.updates() == [1])
    agentctl.restart()
    # Written while no stream is open: delivered after the reconnect, once.
    agentctl.append(
        "session_update", {"sessionId": "acp-1", "update": {"sessionUpdate": "agent_message_chunk"}}
    )
    await until("second entry", lambda: gateway.client.updates() == [1, 2])
    agentctl.append("turn_end", {"stopReason": "end_turn"})
    await until("third entry", lambda: gateway.client.updates() == [1, 2, 3])


async def test_an_agent_that_exited_and_was_resumed_is_ready_again_without_the_old_error(
    gateway: Gateway,
) -> None:
    await gateway.session(ready=True)
    await until("stream open", lambda: gateway.connected())
    gateway.agentctl().append(
        "agent_error", {"error": "agent_exited", "message": "agent exited during a turn"}
    )
    await until("failed", lambda: gateway.client.statuses()[-1:] == ["failed"])
    # The agent container restarted: agentctl stays ready while the operator resumes the ACP session.
    restarting = status(ready=True, phase="Starting")
    for condition in restarting["conditions"][1:]:
        condition.update(status="False", reason="AgentRestarted")
    await gateway.kube.patch(AGENT_SESSIONS, NS, NAME, {"status": restarting}, status=True)
    await until("initializing", lambda: gateway.client.statuses()[-1:] == ["initializing"])
    resumed = len(gateway.client.statuses())
    await gateway.operator_writes(ready=True)
    await until("ready", lambda: gateway.client.statuses()[-1:] == ["ready"])
    assert gateway.client.statuses()[resumed:] == ["ready"]


async def test_a_fresh_journal_is_followed_from_its_start(gateway: Gateway) -> None:
    await gateway.session(ready=True)
    agentctl = gateway.agentctl()
    await until("stream open", lambda: gateway.connected())
    for _ in range(3):
        agentctl.append("session_update", {"update": {"sessionUpdate": "agent_message_chunk"}})
    await until("three entries", lambda: gateway.client.updates() == [1, 2, 3])
    agentctl.restart(new_journal=True)
    agentctl.append("session_update", {"update": {"sessionUpdate": "agent_message_chunk"}})
    await until("the new journal's first entry", lambda: gateway.client.updates() == [1, 2, 3, 1])


async def test_a_replaced_pod_moves_the_stream_to_the_new_agentctl(gateway: Gateway) -> None:
    await gateway.session(ready=True)
    await until("stream open", lambda: gateway.connected())
    await gateway.operator_writes(ready=True, pod_uid="pod-2", pod_ip="10.0.0.8")
    await until(
        "new endpoint", lambda: (endpoint("10.0.0.8"), token_of(NS, NAME)) in gateway.agentctls.connections
    )
    gateway.agentctl("10.0.0.8").append(
        "session_update", {"update": {"sessionUpdate": "agent_message_chunk"}}
    )
    await until("entry of the new agentctl", lambda: gateway.client.updates()[-1:] == [1])


async def test_initialize_resumes_a_suspended_session_once_for_concurrent_callers(gateway: Gateway) -> None:
    await gateway.session(suspend=True)
    await until("cached", lambda: gateway.cache.get(KEY) is not None)
    waiters = [asyncio.create_task(gateway.registry.lifecycle.start_and_wait(KEY)) for _ in range(3)]
    await until("resumed", lambda: "patch AgentSession s1" in gateway.kube.verbs())
    await gateway.operator_writes(ready=True)
    await asyncio.gather(*waiters)
    assert gateway.kube.verbs().count("patch AgentSession s1") == 1
    assert gateway.kube.find(KIND, NS, NAME)["spec"]["suspend"] is False  # type: ignore[index]
    assert gateway.connected()


async def test_suspend_sets_spec_suspend_and_initialize_resumes(gateway: Gateway) -> None:
    await gateway.session(ready=True)
    await until("cached", lambda: gateway.cache.get(KEY) is not None)
    await gateway.registry.lifecycle.suspend(gateway.registry.session(KEY))
    assert gateway.kube.find(KIND, NS, NAME)["spec"]["suspend"] is True  # type: ignore[index]
    await until("seen suspended", lambda: gateway.cache.get(KEY)["spec"]["suspend"] is True)  # type: ignore[index]
    resuming = asyncio.create_task(gateway.registry.lifecycle.start_and_wait(KEY))
    await until("resumed", lambda: gateway.kube.find(KIND, NS, NAME)["spec"]["suspend"] is False)  # type: ignore[index]
    await resuming
    with pytest.raises(RequestError) as gone:
        await gateway.registry.lifecycle.suspend(gateway.registry.session((NS, "nope")))
    assert gone.value.code == ErrorCode.NOT_FOUND


async def test_initialize_reports_a_failed_session_with_its_reason(gateway: Gateway) -> None:
    await gateway.session(suspend=True)
    await until("cached", lambda: gateway.cache.get(KEY) is not None)
    waiting = asyncio.create_task(gateway.registry.lifecycle.start_and_wait(KEY))
    await until("resumed", lambda: "patch AgentSession s1" in gateway.kube.verbs())
    await gateway.operator_writes(ready=False, phase="Failed", message="image not found")
    with pytest.raises(RequestError) as failed:
        await waiting
    assert failed.value.code == ErrorCode.CONFLICT
    assert "image not found" in failed.value.message


async def test_initialize_times_out_with_the_reason_the_session_shows(gateway: Gateway) -> None:
    await gateway.session(ready=False, message="waiting for the scheduler")
    await until("cached", lambda: gateway.cache.get(KEY) is not None)
    with pytest.raises(RequestError) as late:
        await gateway.registry.lifecycle.start_and_wait(KEY)
    assert late.value.code == ErrorCode.TIMEOUT
    assert "waiting for the scheduler" in late.value.message


async def test_a_client_asking_before_readiness_is_told_to_wait(gateway: Gateway) -> None:
    await gateway.session(ready=False)
    await until("cached", lambda: gateway.cache.get(KEY) is not None)
    with pytest.raises(RequestError) as early:
        await gateway.ready_client()
    assert early.value.code == ErrorCode.AGENTCTL_NOT_READY


async def test_a_deleted_session_is_announced_and_its_stream_closed(gateway: Gateway) -> None:
    await gateway.session(ready=True)
    await until("stream open", lambda: gateway.connected())
    await gateway.kube.delete(AGENT_SESSIONS, NS, NAME)
    await until("removed", lambda: any(isinstance(e, AgentRemoved) for e in gateway.client.events))
    removed = next(e for e in gateway.client.events if isinstance(e, AgentRemoved))
    assert removed.info["status"] == "killed"
    assert KEY not in gateway.registry.links.runtimes


async def test_a_resume_waits_for_the_operator_to_see_it_not_for_the_status_from_before(
    gateway: Gateway,
) -> None:
    """Resumed while the operator still drains and deletes the suspended pod: the status from before the suspend
    (Ready, the old pod's agentctl) is out of date; the session serves once the operator wrote one that saw the
    resume. Served from the old status, a client got `ready` from a pod about to go, then `initializing` for as
    long as the new pod took to start."""
    await gateway.session(ready=True)
    await until("connected", gateway.connected)
    await gateway.operator_writes(ready=True, observed=1)
    await gateway.registry.lifecycle.suspend(gateway.registry.session(KEY))
    await until("seen suspended", lambda: gateway.registry.session(KEY).view.suspended)
    # The operator has not written since: the status still says Ready, for the generation before the suspend.
    resuming = asyncio.create_task(gateway.registry.lifecycle.start_and_wait(KEY))
    await until("resumed", lambda: not gateway.registry.session(KEY).view.suspended)
    for _ in range(50):  # every chance to (wrongly) take the old status
        await asyncio.sleep(0)
    assert not resuming.done(), "the resume was served from the status written before it"
    generation = gateway.registry.session(KEY).view.generation
    await gateway.operator_writes(ready=True, pod_uid="pod-2", pod_ip="10.0.0.8", observed=generation)
    async with asyncio.timeout(5):
        await resuming
    assert gateway.registry.links.runtimes[KEY].endpoint_key == (endpoint("10.0.0.8"), "pod-2")


async def test_a_watch_event_reads_the_status_once(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its status change, the stream it converges and the requests after it all share one reading of the version."""
    await gateway.session(ready=True)
    await until("connected", gateway.connected)
    reads: list[object] = []
    validate = AgentSessionStatus.model_validate

    def counted(*args: Any, **kwargs: Any) -> AgentSessionStatus:
        reads.append(args[0])
        return validate(*args, **kwargs)

    monkeypatch.setattr(AgentSessionStatus, "model_validate", counted)
    published = len(gateway.client.phases())
    await gateway.operator_writes(ready=True, phase="Ready", message="one more")
    await until("published", lambda: len(gateway.client.phases()) > published)
    await gateway.ready_client()
    gateway.info()
    assert len(reads) == 1


async def test_a_connection_asks_its_access_to_a_namespace_once() -> None:
    asked: list[tuple[str, str]] = []
    answer = asyncio.Event()

    class Auth:
        async def allowed(self, identity: Any, namespace: str, verb: str, name: str = "") -> bool:
            asked.append((namespace, verb))
            await answer.wait()
            return namespace == "team"

    conn = Connection(None, LifecycleCodec(), Identity("u", "uid"), Auth())  # type: ignore[arg-type]
    conn.admitted({"other": False})
    waiting = [asyncio.create_task(conn.authorize_namespace("team")) for _ in range(3)]
    await until("asked", lambda: bool(asked))
    answer.set()
    assert await asyncio.gather(*waiting) == [True, True, True]
    assert await conn.authorize_namespace("team") is True
    assert await conn.authorize_namespace("other") is False  # what admission learnt
    assert asked == [("team", "get")]
