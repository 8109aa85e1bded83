"""Faults on a node, as everyone watching a session sees them: agentctl crash-looping, the agent killed in the
middle of a turn, the node's kubelet stopped.

Each fault shows in the session's conditions, in a Warning Event and in the gateway's `agent_status` within seconds
of the kubelet (or the node controller) reporting it; the history survives; and the session is Ready again by
itself once the cause is gone. Each test prints what it measured: detection (the fault reported → condition,
Event, gateway event) and recovery (the cause gone → Ready).

The node is this machine (the local cluster): the tests kill the pod's processes from the host and stop the node's
kubelet with `hack/cluster/component.sh`, for as short a time as the node controller needs to notice.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import watch
from tests.conftest import wait_until
from tests.support import cluster_components
from tests.support.gateway import (
    Client,
    GatewayProcess,
    gateway_process,
    initialize,
    of_type,
    prompt_and_wait,
    user_prompts,
)
from tests.support.kube import Sessions
from tests.support.node_processes import agentctl_pid, container_processes
from tests.support.processes import OperatorProcess

from agentsession.agentctl_client import AgentctlClient
from agentsession.api.constants import GROUP, PLURAL, VERSION
from agentsession.contract.wire import JournalEntry

# The faults are made from the host: the local cluster only, whose node is this machine.
pytestmark = [pytest.mark.cluster, pytest.mark.kubelet, pytest.mark.usefixtures("local_cluster")]

POLL = 0.2
# How long a sign may lag the report it follows; generous for a shared machine: the measured times are printed.
DETECT = 15.0
RECOVER = 90.0
# A watch is opened again this often, so a stopped one ends soon after the test.
WATCH_WINDOW = 10
# The kubelet backs off after an agentctl exit right after a restart; a few in a row are needed at most.
MAX_KILLS = 5
# The node controller marks a silent node after --node-monitor-grace-period (16 s in hack/cluster/up.sh); the
# kubelet is down for at most OUTAGE, since the cluster is shared.
NODE_SILENT = 25.0
OUTAGE = 30.0
# The demo agent streams one word per tick (0.05 s) with __slow__: a turn of about 10 s.
LONG_PROMPT = "__slow__ " + " ".join(f"w{i}" for i in range(200))


@pytest.fixture
def gateway(
    kubeconfig: str, crd_installed: list[str], namespace: str, tmp_path: Path
) -> Iterator[GatewayProcess]:
    args = ("--namespace", namespace, "--insecure-dev-mode")
    with gateway_process(kubeconfig, tmp_path / "gateway.log", *args) as running:
        yield running


@pytest.fixture
async def ui(gateway: GatewayProcess) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        connected = Client(await http.ws_connect(gateway.ws_url))
        try:
            yield connected
        finally:
            await connected.close()


class Versions:
    """Every version of one object the API server sends, with when it arrived (a watch in a thread): a state
    shorter than a poll is still seen, and a sign's moment is its arrival, not the end of a poll."""

    def __init__(self, list_call: Callable[..., Any], *args: Any, name: str) -> None:
        self._call, self._args, self._selector = list_call, args, f"metadata.name={name}"
        self.seen: list[tuple[float, Any]] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"watch {name}", daemon=True)

    def __enter__(self) -> Versions:
        self._thread.start()
        wait_until("the watch's first version", lambda: self.seen, timeout=30, interval=0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()

    def _follow(self) -> None:
        while not self._stopping.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self._call, *self._args, field_selector=self._selector, timeout_seconds=WATCH_WINDOW
                ):
                    self.seen.append((time.monotonic(), event["object"]))
                    if self._stopping.is_set():
                        break
            except Exception:  # the API server restarting, say: follow again
                time.sleep(POLL)
            finally:
                stream.stop()

    async def first(
        self, what: str, match: Callable[[Any], bool], since: float, within: float
    ) -> tuple[float, Any]:
        """The first version that arrived at `since` or later and matches, and when it arrived."""
        deadline = time.monotonic() + within
        while (
            hit := next(((at, obj) for at, obj in list(self.seen) if at >= since and match(obj)), None)
        ) is None:
            if time.monotonic() >= deadline:
                pytest.fail(f"timed out after {within:.0f}s waiting for {what}", pytrace=False)
            await asyncio.sleep(0.05)
        return hit


class Timeline:
    """When each sign of a fault showed (this process's monotonic clock), reported from the one it follows."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.marks: dict[str, float] = {}
        self.origins: dict[str, str] = {}

    def mark(self, what: str, after: str | None = None, at: float | None = None) -> float:
        self.marks[what] = time.monotonic() if at is None else at
        if after is not None:
            self.origins[what] = after
        return self.marks[what]

    async def version(
        self, versions: Versions, what: str, match: Callable[[Any], bool], after: str, since: float,
        within: float = DETECT,
    ) -> Any:  # fmt: skip
        at, found = await versions.first(what, match, since, within)
        self.mark(what, after, at)
        return found

    async def poll(self, what: str, probe: Callable[[], Any], after: str, within: float = DETECT) -> Any:
        """For what no watch follows (Events): waits off the event loop until `probe` answers, marks that."""
        found = await asyncio.to_thread(wait_until, what, probe, within, POLL)
        self.mark(what, after)
        return found

    async def frame(
        self, ui: Client, what: str, match: Callable[[dict[str, Any]], bool], since: int, after: str,
        within: float = DETECT,
    ) -> dict[str, Any]:  # fmt: skip
        found = await ui.wait_for(what, match, within, since=since)
        self.mark(what, after)
        return found

    def report(self) -> None:
        print(f"\n{self.title}:")
        for what, origin in self.origins.items():
            print(f"  {self.marks[what] - self.marks[origin]:6.2f} s  {origin} → {what}")


async def together(*waits: Awaitable[Any]) -> list[Any]:
    """Waits for every sign at once, so each is marked when it shows and not when the one before it did."""
    return list(await asyncio.gather(*waits))


def session_versions(sessions: Sessions, name: str) -> Versions:
    args = (GROUP, VERSION, sessions.namespace, PLURAL)
    return Versions(sessions.custom.list_namespaced_custom_object, *args, name=name)


def pod_versions(sessions: Sessions, name: str) -> Versions:
    return Versions(
        sessions.core.list_namespaced_pod, sessions.namespace, name=sessions.pod(name).metadata.name
    )


def condition(kind: str, status: str, reason: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """Matches an AgentSession (as the API serves it) whose condition `kind` has this status and reason."""

    def match(session: dict[str, Any]) -> bool:
        found = next((c for c in session.get("status", {}).get("conditions", []) if c["type"] == kind), None)
        return found is not None and found["status"] == status and reason in (None, found["reason"])

    return match


def message(session: dict[str, Any], kind: str) -> str:
    return str(next(c["message"] for c in session["status"]["conditions"] if c["type"] == kind))


def container_of(pod: Any, which: str) -> Any:
    statuses = (pod.status.init_container_statuses or []) + (pod.status.container_statuses or [])
    return next((s for s in statuses if s.name == which), None)


def back_off(which: str) -> Callable[[Any], bool]:
    def match(pod: Any) -> bool:
        found = container_of(pod, which)
        waiting = found.state.waiting if found is not None else None
        return waiting is not None and waiting.reason == "CrashLoopBackOff"

    return match


def node_ready(ready: bool) -> Callable[[Any], bool]:
    """Matches a Node whose Ready condition is True (`ready`), or anything else: False, Unknown."""
    return lambda node: any(
        c.type == "Ready" and (c.status == "True") is ready for c in node.status.conditions or []
    )


def status_of(agent_id: str, status: str, error: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """An `agent_status` frame of this agent with this status (and, if given, words of its error)."""

    def match(frame: dict[str, Any]) -> bool:
        if not of_type("agent_status", agentId=agent_id, status=status)(frame):
            return False
        return error is None or error in (frame["payload"]["info"].get("error") or "")

    return match


def warning(sessions: Sessions, name: str, reason: str) -> Any:
    return next((e for e in sessions.events(name) if e.type == "Warning" and e.reason == reason), None)


async def agentctl_history(sessions: Sessions, name: str) -> list[JournalEntry]:
    """The whole journal, read through the session's agentctl at its pod IP with the session's token."""
    endpoint = sessions.get(name)["status"]["agentctlEndpoint"]
    async with aiohttp.ClientSession() as http:
        return (await AgentctlClient(http, endpoint, sessions.token(name)).history()).updates


def backed_off_or_restarted(pod: Versions, since: float, token: str, killed: set[int]) -> str | None:
    """What the kubelet did after the kill at `since`: backed off (reported CrashLoopBackOff) or started a new
    agentctl; None until either."""
    if any(at >= since and back_off("agentctl")(version) for at, version in list(pod.seen)):
        return "backed off"
    pid = agentctl_pid(token)
    return "restarted" if pid is not None and pid not in killed else None


def kill_agentctl_until_backed_off(pod: Versions, token: str, timeline: Timeline) -> int:
    """SIGKILLs each agentctl the kubelet starts for the session until the kubelet backs off (CrashLoopBackOff);
    returns how many it killed, and marks the last kill."""
    killed: set[int] = set()
    for _ in range(MAX_KILLS):
        pid = wait_until(
            "a new agentctl process",
            lambda: (p := agentctl_pid(token)) is not None and p not in killed and p,
            timeout=30,
        )
        os.kill(pid, signal.SIGKILL)
        at = timeline.mark("last kill")
        killed.add(pid)
        outcome = functools.partial(backed_off_or_restarted, pod, at, token, killed)
        if wait_until("the kubelet to restart agentctl or back off", outcome, 30) == "backed off":
            return len(killed)
    pytest.fail(f"the kubelet restarted agentctl {MAX_KILLS} times without backing off", pytrace=False)


async def test_agentctl_crash_looping_shows_and_the_session_recovers_with_its_history(
    node_operator: OperatorProcess, sessions: Sessions, namespace: str, ui: Client
) -> None:
    sessions.create("crashy", {"workspace": {"emptyDir": True}})
    agent_id = f"{namespace}/crashy"
    await sessions.until_ready("crashy")
    await initialize(ui, agent_id, "first")
    await prompt_and_wait(ui, agent_id, "a prompt before the crashes")
    before = (await initialize(ui, agent_id, "before"))["updates"]

    timeline = Timeline("agentctl crash-looping (SIGKILL until the kubelet backs off)")
    mark = len(ui.frames)
    token = sessions.token("crashy")
    with session_versions(sessions, "crashy") as session, pod_versions(sessions, "crashy") as pod:
        began = time.monotonic()
        kills = await asyncio.to_thread(kill_agentctl_until_backed_off, pod, token, timeline)
        reported = "kubelet: agentctl CrashLoopBackOff"
        await timeline.version(pod, reported, back_off("agentctl"), "last kill", began)
        crashing, event, frame = await together(
            timeline.version(
                session,
                "AgentctlReady False CrashLoopBackOff",
                condition("AgentctlReady", "False", "CrashLoopBackOff"),
                reported,
                began,
            ),
            timeline.poll(
                "Warning Event CrashLoopBackOff",
                lambda: warning(sessions, "crashy", "CrashLoopBackOff"),
                reported,
            ),
            timeline.frame(
                ui, "gateway: failed", status_of(agent_id, "failed", "keeps crashing"), mark, reported
            ),
        )
        # The kubelet has restarted it once less than it was killed: the last restart waits for the back-off.
        said = f"agentctl keeps crashing (restarts: {kills - 1}); last exit code 137"
        assert said in message(crashing, "AgentctlReady")
        assert condition("Ready", "False", "CrashLoopBackOff")(crashing)
        assert said in event.message
        assert said in frame["payload"]["info"]["error"]

        # No more kills: the kubelet starts agentctl after its back-off, and the session resumes by itself.
        back = "kubelet: agentctl ready again"
        await together(
            timeline.version(
                pod, back, lambda p: container_of(p, "agentctl").ready, "last kill", began, RECOVER
            ),
            timeline.version(
                session, "session Ready", condition("Ready", "True"), back, timeline.marks[reported], RECOVER
            ),
            timeline.frame(ui, "gateway: ready", status_of(agent_id, "ready"), mark, back, RECOVER),
        )
    timeline.report()
    print(f"  ({kills} kills; after the last one the kubelet backs off, then starts agentctl)")

    after = (await initialize(ui, agent_id, "after"))["updates"]
    assert after[: len(before)] == before, "the history changed across agentctl's restarts"
    assert user_prompts(after) == ["a prompt before the crashes"]
    await prompt_and_wait(ui, agent_id, "a prompt after the crashes")


async def test_the_agent_killed_mid_turn_ends_the_turn_with_an_error_and_the_session_recovers(
    node_operator: OperatorProcess, sessions: Sessions, namespace: str, ui: Client
) -> None:
    sessions.create("dies", {"workspace": {"emptyDir": True}})
    agent_id = f"{namespace}/dies"
    await sessions.until_ready("dies")
    await initialize(ui, agent_id, "first")
    await prompt_and_wait(ui, agent_id, "a prompt before the crash")

    mark = len(ui.frames)
    await ui.send({"type": "send_agent_message", "agentId": agent_id, "text": LONG_PROMPT})
    await ui.wait_for("processing", status_of(agent_id, "processing"), since=mark)
    await ui.wait_for(
        "a few words of the long turn",
        lambda f: f["type"] == "agent_update" and "w5 " in str(f["payload"]["notification"]),
        since=mark,
    )
    before = await agentctl_history(sessions, "dies")
    # The session is Ready once its agent answers ACP; the kubelet may report the agent's container a moment later.
    agent_container = await asyncio.to_thread(
        wait_until,
        "the kubelet to report the agent's container",
        lambda: getattr(container_of(sessions.pod("dies"), "agent"), "container_id", None),
        30,
    )
    (process,) = [
        p
        for p in container_processes(agent_container)
        if any(part.endswith("agentsession-demo-agent") for part in p.argv[:2])
    ]
    timeline = Timeline("the agent killed mid-turn (SIGKILL of its process)")
    with session_versions(sessions, "dies") as session, pod_versions(sessions, "dies") as pod:
        killed = len(ui.frames)
        os.kill(process.pid, signal.SIGKILL)
        at = timeline.mark("agent killed")

        reported = "kubelet: agent container restarted"
        frame, _ = await together(
            timeline.frame(
                ui, "gateway: failed", status_of(agent_id, "failed", "during a turn"), killed, "agent killed"
            ),
            timeline.version(
                pod, reported, lambda p: container_of(p, "agent").restart_count >= 1, "agent killed", at
            ),
        )
        assert "agent exited during a turn" in frame["payload"]["info"]["error"]
        restarted, event = await together(
            timeline.version(
                session,
                "AgentInitialized False AgentRestarted",
                condition("AgentInitialized", "False", "AgentRestarted"),
                reported,
                at,
            ),
            timeline.poll(
                "Warning Event AgentRestarted", lambda: warning(sessions, "dies", "AgentRestarted"), reported
            ),
        )
        assert "the agent container restarted (exit code 137" in message(restarted, "Ready")
        assert "exit code 137" in event.message
        await together(
            timeline.version(
                session,
                "session Ready",
                condition("Ready", "True"),
                reported,
                timeline.marks["AgentInitialized False AgentRestarted"],
                RECOVER,
            ),
            timeline.frame(ui, "gateway: ready", status_of(agent_id, "ready"), killed, reported, RECOVER),
        )
    timeline.report()

    # The turn ended, with the error, in the history; everything before the kill is kept as it was.
    after = await agentctl_history(sessions, "dies")
    assert after[: len(before)] == before
    (cut,) = [e.notification for e in after[len(before) :] if e.kind == "turn_end"]
    assert cut["stopReason"] == "error"
    assert "agent connection lost during session/prompt" in cut["error"]
    await prompt_and_wait(ui, agent_id, "a prompt after the crash")
    history = (await initialize(ui, agent_id, "after"))["updates"]
    assert user_prompts(history) == ["a prompt before the crash", LONG_PROMPT, "a prompt after the crash"]


def pod_ready(sessions: Sessions, name: str) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in sessions.pod(name).status.conditions or [])


async def test_a_stopped_kubelet_shows_as_a_node_not_reporting_and_the_session_recovers(
    node_operator: OperatorProcess, sessions: Sessions, namespace: str, ui: Client
) -> None:
    sessions.create("stranded", {"workspace": {"emptyDir": True}})
    agent_id = f"{namespace}/stranded"
    await sessions.until_ready("stranded")
    await initialize(ui, agent_id, "first")
    await prompt_and_wait(ui, agent_id, "a prompt before the node went silent")
    node = sessions.pod("stranded").spec.node_name
    # The node controller turns only a Ready pod's condition False: the agent container's probe comes last.
    await asyncio.to_thread(wait_until, "the pod Ready", lambda: pod_ready(sessions, "stranded"), 30)

    timeline = Timeline("the node's kubelet stopped")
    mark = len(ui.frames)
    with (
        session_versions(sessions, "stranded") as session,
        Versions(sessions.core.list_node, name=node) as nodes,
    ):
        await asyncio.to_thread(cluster_components.stop, "kubelet")
        stopped = timeline.mark("kubelet stopped")
        starting: asyncio.Future[None] | None = None
        try:
            reported = "node controller: node not Ready"
            await timeline.version(
                nodes, reported, node_ready(False), "kubelet stopped", stopped, NODE_SILENT
            )
            within = OUTAGE - (time.monotonic() - stopped)
            unknown, event, frame = await together(
                timeline.version(
                    session,
                    "Ready Unknown NodeNotReady",
                    condition("Ready", "Unknown", "NodeNotReady"),
                    reported,
                    stopped,
                    within,
                ),
                timeline.poll(
                    "Warning Event NodeNotReady",
                    lambda: warning(sessions, "stranded", "NodeNotReady"),
                    reported,
                    within,
                ),
                timeline.frame(
                    ui,
                    "gateway: failed",
                    status_of(agent_id, "failed", "stopped reporting"),
                    mark,
                    reported,
                    within,
                ),
            )
            said = f"node {node} stopped reporting"
            assert said in message(unknown, "Ready")
            assert unknown["status"]["phase"] == "Unknown"
            assert said in event.message
            assert said in frame["payload"]["info"]["error"]

            restarted = "kubelet started again"
            recovering = len(ui.frames)
            at = timeline.mark(restarted)
            starting = asyncio.ensure_future(asyncio.to_thread(cluster_components.start, "kubelet"))
            await together(
                timeline.version(nodes, "node Ready", node_ready(True), restarted, at, RECOVER),
                timeline.version(
                    session, "session Ready", condition("Ready", "True"), restarted, at, RECOVER
                ),
                timeline.frame(
                    ui, "gateway: ready", status_of(agent_id, "ready"), recovering, restarted, RECOVER
                ),
            )
        finally:
            # However the test went, the node is back for everyone who shares the cluster.
            await (starting or asyncio.to_thread(cluster_components.start, "kubelet"))
    timeline.report()
    print(f"  (kubelet down {timeline.marks[restarted] - stopped:.1f} s)")
    await prompt_and_wait(ui, agent_id, "a prompt after the node came back")
    history = (await initialize(ui, agent_id, "after"))["updates"]
    assert user_prompts(history) == [
        "a prompt before the node went silent",
        "a prompt after the node came back",
    ]
