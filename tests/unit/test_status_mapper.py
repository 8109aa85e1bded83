"""Observed pod situations → conditions, reasons and phase (the table the operator lives by)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from agentsession.api.models import AcpStatus, AgentSessionStatus
from agentsession.api.views import EventView
from agentsession.controller.status_mapper import (
    Observation,
    latest_readiness_failure,
    map_status,
    start_due,
    termination_tail,
)
from tests.support.pod_bodies import CREATED, NOW, UID, pod_body


def pod(
    *,
    phase: str = "Pending",
    scheduled: dict[str, Any] | None = None,
    agentctl: dict[str, Any] | None = None,
    agent: dict[str, Any] | None = None,
    reason: str | None = None,
    message: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {k: v for k, v in (("reason", reason), ("message", message)) if v}
    if phase == "Running":
        status.update(podIP="10.1.2.3", startTime=CREATED)
    body = pod_body(
        phase=phase,
        conditions=[] if scheduled is None else [{"type": "PodScheduled", **scheduled}],
        agentctl=None if agentctl is None else {"restartCount": 0, **agentctl},
        agent=None if agent is None else {"restartCount": 0, **agent},
        **status,
    )
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return body


SCHEDULED = {"status": "True"}
RUNNING = {"state": {"running": {"startedAt": CREATED}}, "started": True}
AGENTCTL_READY = {**RUNNING, "ready": True}
AGENT_EXIT = {
    "exitCode": 1,
    "reason": "Error",
    "message": "starting\nError: CODEX_HOME points to '/workspace/.codex', but that path does not exist\n",
}
INITIALIZED = AcpStatus(sessionId="sess-1", podUID=UID, agentctlRestartCount=0, currentModeId="code")
AGENT_KILLED = {"exitCode": 137, "reason": "Error"}


def with_conditions(body: dict[str, Any], **statuses: str) -> dict[str, Any]:
    """The pod with these conditions (type=status, or type=status/reason) next to the ones it has."""
    for kind, value in statuses.items():
        status, _, reason = value.partition("/")
        condition = {"type": kind, "status": status, "lastTransitionTime": "2026-01-01T11:59:58Z"}
        body["status"]["conditions"].append({**condition, **({"reason": reason} if reason else {})})
    return body


def ready_pod(**agent: Any) -> dict[str, Any]:
    return pod(phase="Running", scheduled=SCHEDULED, agentctl=AGENTCTL_READY, agent={**RUNNING, **agent})


@dataclass
class Case:
    id: str
    pod: dict[str, Any] | None
    phase: str
    reasons: dict[str, str]
    suspend: bool = False
    previous: AgentSessionStatus = field(default_factory=AgentSessionStatus)
    probe_message: str | None = None
    ready: str = "False"


def config_error(message: str) -> dict[str, Any]:
    """A container status the kubelet gives when it cannot make a container's configuration."""
    return {"state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}}}


CASES = [
    Case(
        "no pod yet",
        None,
        "Pending",
        {"PodScheduled": "PodNotCreated", "AgentctlReady": "PodNotCreated", "Ready": "PodNotCreated"},
    ),
    Case(
        "unschedulable",
        pod(
            scheduled={"status": "False", "reason": "Unschedulable", "message": "0/1 nodes: insufficient cpu"}
        ),
        "Pending",
        {"PodScheduled": "Unschedulable", "AgentctlReady": "Unschedulable", "Ready": "Unschedulable"},
    ),
    Case(
        "waiting for the scheduler",
        pod(),
        "Pending",
        {"PodScheduled": "Pending", "AgentInitialized": "AgentctlNotReady", "Ready": "Pending"},
    ),
    Case(
        "image pull back-off",
        pod(
            scheduled=SCHEDULED,
            agentctl={
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
            },
        ),
        "Pending",
        {"PodScheduled": "Scheduled", "AgentctlReady": "ImagePullBackOff", "Ready": "ImagePullBackOff"},
    ),
    Case(
        "container creating",
        pod(scheduled=SCHEDULED, agentctl={"state": {"waiting": {"reason": "ContainerCreating"}}}),
        "Starting",
        {
            "AgentctlReady": "ContainerCreating",
            "AgentInitialized": "AgentctlNotReady",
            "Ready": "ContainerCreating",
        },
    ),
    Case(
        "kubelet has not reported agentctl yet",
        pod(scheduled=SCHEDULED),
        "Starting",
        {"AgentctlReady": "ContainerCreating"},
    ),
    Case(
        "agentctl waiting for its startup probe",
        pod(phase="Pending", scheduled=SCHEDULED, agentctl={"state": {"running": {}}, "started": False}),
        "Starting",
        {"AgentctlReady": "Starting", "Ready": "Starting"},
    ),
    Case(
        "agentctl probe failing",
        pod(phase="Running", scheduled=SCHEDULED, agentctl=RUNNING, agent=RUNNING),
        "Starting",
        {"AgentctlReady": "ProbeFailing", "AgentInitialized": "AgentctlNotReady", "Ready": "ProbeFailing"},
        probe_message="Readiness probe failed: HTTP probe failed with statuscode: 503",
    ),
    Case(
        "agentctl started, readiness not probed yet",
        pod(phase="Running", scheduled=SCHEDULED, agentctl=RUNNING, agent=RUNNING),
        "Starting",
        {"AgentctlReady": "Starting", "Ready": "Starting"},
    ),
    Case(
        "agentctl ready, ACP not yet initialized",
        pod(phase="Running", scheduled=SCHEDULED, agentctl=AGENTCTL_READY, agent=RUNNING),
        "Starting",
        {"AgentctlReady": "ProbeSucceeded", "AgentInitialized": "Initializing", "Ready": "Initializing"},
    ),
    Case(
        "ACP initialized",
        pod(phase="Running", scheduled=SCHEDULED, agentctl=AGENTCTL_READY, agent=RUNNING),
        "Ready",
        {"PodScheduled": "Scheduled", "AgentctlReady": "ProbeSucceeded", "AgentInitialized": "Initialized"},
        previous=AgentSessionStatus(acp=INITIALIZED),
        ready="True",
    ),
    Case(
        "ACP initialize failed",
        pod(phase="Running", scheduled=SCHEDULED, agentctl=AGENTCTL_READY, agent=RUNNING),
        "Starting",
        {"AgentInitialized": "InitializeFailed", "Ready": "InitializeFailed"},
        previous=AgentSessionStatus(acp=INITIALIZED.model_copy(update={"lastError": "agent exited"})),
    ),
    Case(
        "agentctl restarted",
        pod(
            phase="Running",
            scheduled=SCHEDULED,
            agentctl={**AGENTCTL_READY, "restartCount": 1},
            agent=RUNNING,
        ),
        "Starting",
        {
            "AgentctlReady": "ProbeSucceeded",
            "AgentInitialized": "AgentctlRestarted",
            "Ready": "AgentctlRestarted",
        },
        previous=AgentSessionStatus(acp=INITIALIZED),
    ),
    Case(
        "ACP initialized for an earlier pod",
        pod(phase="Running", scheduled=SCHEDULED, agentctl=AGENTCTL_READY, agent=RUNNING),
        "Starting",
        {"AgentInitialized": "Initializing"},
        previous=AgentSessionStatus(acp=INITIALIZED.model_copy(update={"podUID": "older-pod"})),
    ),
    Case(
        "agent container crash-looping",
        pod(
            phase="Running",
            scheduled=SCHEDULED,
            agentctl=AGENTCTL_READY,
            agent={
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": AGENT_EXIT},
            },
        ),
        "Failed",
        {
            "AgentctlReady": "ProbeSucceeded",
            "AgentInitialized": "CrashLoopBackOff",
            "Ready": "CrashLoopBackOff",
        },
        previous=AgentSessionStatus(acp=INITIALIZED),
    ),
    Case(
        "agent exited before its ACP session started",
        pod(
            phase="Running",
            scheduled=SCHEDULED,
            agentctl=AGENTCTL_READY,
            agent={**RUNNING, "restartCount": 1, "lastState": {"terminated": AGENT_EXIT}},
        ),
        "Starting",
        {"AgentctlReady": "ProbeSucceeded", "AgentInitialized": "AgentExited", "Ready": "AgentExited"},
    ),
    Case(
        "agent exited, then start failed on the restarted one",
        pod(
            phase="Running",
            scheduled=SCHEDULED,
            agentctl=AGENTCTL_READY,
            agent={**RUNNING, "restartCount": 1, "lastState": {"terminated": AGENT_EXIT}},
        ),
        "Starting",
        {"AgentInitialized": "AgentExited"},
        previous=AgentSessionStatus(
            acp=AcpStatus(podUID=UID, agentctlRestartCount=0, lastError="agent closed agent.out")
        ),
    ),
    Case(
        "agent exited once, then its session started: initialized",
        pod(
            phase="Running",
            scheduled=SCHEDULED,
            agentctl=AGENTCTL_READY,
            agent={**RUNNING, "restartCount": 1, "lastState": {"terminated": AGENT_EXIT}},
        ),
        "Ready",
        {"AgentInitialized": "Initialized", "Ready": "Ready"},
        previous=AgentSessionStatus(acp=INITIALIZED),
        ready="True",
    ),
    Case(
        "the agent container restarted after its ACP session started",
        ready_pod(restartCount=1, lastState={"terminated": AGENT_KILLED}),
        "Starting",
        {"AgentctlReady": "ProbeSucceeded", "AgentInitialized": "AgentRestarted", "Ready": "AgentRestarted"},
        previous=AgentSessionStatus(acp=INITIALIZED.model_copy(update={"agentRestartCount": 0})),
    ),
    Case(
        "the restarted agent's ACP session resumed",
        ready_pod(restartCount=1, lastState={"terminated": AGENT_KILLED}),
        "Ready",
        {"AgentInitialized": "Initialized", "Ready": "Ready"},
        previous=AgentSessionStatus(acp=INITIALIZED.model_copy(update={"agentRestartCount": 1})),
        ready="True",
    ),
    Case(
        "the node stopped reporting: the node controller turned the pod's Ready False",
        with_conditions(ready_pod(), Ready="False", ContainersReady="True"),
        "Unknown",
        {
            "PodScheduled": "Scheduled",
            "AgentctlReady": "NodeNotReady",
            "AgentInitialized": "NodeNotReady",
            "Ready": "NodeNotReady",
        },
        previous=AgentSessionStatus(acp=INITIALIZED),
        ready="Unknown",
    ),
    Case(
        "the kubelet's own not ready: containers not ready",
        with_conditions(
            ready_pod(ready=False),
            Ready="False/ContainersNotReady",
            ContainersReady="False/ContainersNotReady",
        ),
        "Ready",
        {"AgentctlReady": "ProbeSucceeded", "Ready": "Ready"},
        previous=AgentSessionStatus(acp=INITIALIZED),
        ready="True",
    ),
    Case(
        "readiness gates not ready are not the node",
        with_conditions(ready_pod(), Ready="False/ReadinessGatesNotReady", ContainersReady="True"),
        "Ready",
        {"AgentctlReady": "ProbeSucceeded", "Ready": "Ready"},
        previous=AgentSessionStatus(acp=INITIALIZED),
        ready="True",
    ),
    Case(
        "agentctl crash-looping",
        pod(
            phase="Pending",
            scheduled=SCHEDULED,
            agentctl={"restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
        ),
        "Failed",
        {"AgentctlReady": "CrashLoopBackOff", "Ready": "CrashLoopBackOff"},
    ),
    Case(
        "agentctl's Secret missing",
        pod(
            phase="Pending",
            scheduled=SCHEDULED,
            agentctl=config_error('secret "s-agentctl-token" not found'),
        ),
        "Failed",
        {"AgentctlReady": "CreateContainerConfigError", "Ready": "CreateContainerConfigError"},
    ),
    Case(
        "the kubelet's Secret cache behind a busy API server",
        pod(
            phase="Pending",
            scheduled=SCHEDULED,
            agentctl=config_error("failed to sync secret cache: timed out waiting for the condition"),
        ),
        "Starting",
        {"AgentctlReady": "CreateContainerConfigError", "Ready": "CreateContainerConfigError"},
    ),
    Case(
        "pod evicted",
        pod(phase="Failed", scheduled=SCHEDULED, reason="Evicted", message="The node was low on memory."),
        "Failed",
        {"AgentctlReady": "Evicted", "Ready": "Evicted"},
    ),
    Case(
        "pod failed",
        pod(phase="Failed", scheduled=SCHEDULED, agentctl={"state": {"terminated": {"exitCode": 2}}}),
        "Failed",
        {"AgentctlReady": "PodFailed", "Ready": "PodFailed"},
    ),
    Case(
        "pod deleted behind our back",
        None,
        "Pending",
        {"PodScheduled": "PodDeleted", "AgentctlReady": "PodDeleted", "Ready": "PodDeleted"},
        previous=AgentSessionStatus(podName="s-agent", podUID="gone-uid"),
    ),
    Case(
        "suspended",
        None,
        "Suspended",
        {"Suspended": "Suspended", "PodScheduled": "Suspended", "Ready": "Suspended"},
        suspend=True,
        previous=AgentSessionStatus(acp=INITIALIZED),
    ),
    Case(
        "suspending: pod still terminating",
        pod(phase="Running", scheduled=SCHEDULED, agentctl=AGENTCTL_READY, deleting=True),
        "Suspended",
        {"Suspended": "Suspended", "PodScheduled": "PodTerminating", "Ready": "Suspended"},
        suspend=True,
    ),
]


def observe(case: Case) -> Observation:
    return Observation(
        generation=7,
        suspend=case.suspend,
        previous=case.previous,
        now=NOW,
        pod=case.pod,
        probe_message=case.probe_message,
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_pod_situation_maps_to_conditions(case: Case) -> None:
    status = map_status(observe(case))
    conditions = {c.type: c for c in status.conditions}
    assert [c.type for c in status.conditions] == [
        "PodScheduled",
        "AgentctlReady",
        "AgentInitialized",
        "Suspended",
        "Ready",
        "BudgetExhausted",
    ]
    assert status.phase == case.phase
    assert conditions["Ready"].status == case.ready
    for kind, reason in case.reasons.items():
        assert conditions[kind].reason == reason, f"{kind}: {conditions[kind].message}"
    assert all(c.observedGeneration == 7 and c.message for c in status.conditions)
    assert status.observedGeneration == 7


def test_messages_carry_the_specifics() -> None:
    unschedulable = CASES[1]
    status = map_status(
        Observation(
            generation=1, suspend=False, previous=AgentSessionStatus(), now=NOW, pod=unschedulable.pod
        )
    )
    assert status.condition("PodScheduled").message == "0/1 nodes: insufficient cpu"
    probe = next(c for c in CASES if c.id == "agentctl probe failing")
    status = map_status(
        Observation(
            generation=1,
            suspend=False,
            previous=AgentSessionStatus(),
            now=NOW,
            pod=probe.pod,
            probe_message=probe.probe_message,
        )
    )
    assert "statuscode: 503" in status.condition("AgentctlReady").message
    crash = next(c for c in CASES if c.id == "agent container crash-looping")
    status = map_status(
        Observation(generation=1, suspend=False, previous=crash.previous, now=NOW, pod=crash.pod)
    )
    assert "last exit code 1" in status.condition("Ready").message
    assert "CODEX_HOME points to '/workspace/.codex'" in status.condition("Ready").message
    exited = next(c for c in CASES if c.id == "agent exited before its ACP session started")
    status = map_status(
        Observation(generation=1, suspend=False, previous=exited.previous, now=NOW, pod=exited.pod)
    )
    assert status.condition("Ready").message == (
        "the agent exited before its ACP session started (exit code 1, reason Error: starting | "
        "Error: CODEX_HOME points to '/workspace/.codex', but that path does not exist; restarts: 1)"
    )


def test_restarts_and_lost_nodes_say_what_happened() -> None:
    restarted = next(c for c in CASES if c.id.startswith("the agent container restarted"))
    status = map_status(
        Observation(generation=1, suspend=False, previous=restarted.previous, now=NOW, pod=restarted.pod)
    )
    assert status.condition("Ready").message == (
        "the agent container restarted (exit code 137, reason Error; restarts: 1); resuming the ACP session"
    )
    lost = next(c for c in CASES if c.id.startswith("the node stopped reporting"))
    status = map_status(
        Observation(generation=1, suspend=False, previous=lost.previous, now=NOW, pod=lost.pod)
    )
    assert status.condition("Ready").message.startswith(
        "node node-1 stopped reporting since 2026-01-01T11:59:58Z: agentctl and the agent may still run"
    )
    assert not start_due(
        Observation(generation=1, suspend=False, previous=lost.previous, now=NOW, pod=lost.pod)
    )
    assert start_due(
        Observation(generation=1, suspend=False, previous=restarted.previous, now=NOW, pod=restarted.pod)
    )


def test_termination_messages_are_cut_to_their_last_lines() -> None:
    output = "\n".join(f"line {i}" for i in range(100)) + "\n\n"
    assert termination_tail(output) == "line 95 | line 96 | line 97 | line 98 | line 99"
    long_line = "x" * 5000 + "END"
    tail = termination_tail(long_line)
    assert tail.endswith("END")
    assert len(tail) == 1003
    assert tail.startswith("...")


def test_last_transition_time_moves_only_when_status_changes() -> None:
    starting = next(c for c in CASES if c.id == "agentctl ready, ACP not yet initialized")
    first = map_status(
        Observation(generation=1, suspend=False, previous=AgentSessionStatus(), now=NOW, pod=starting.pod)
    )
    later = NOW + timedelta(seconds=30)
    # Same statuses, different messages and reasons elsewhere: no transition.
    second = map_status(Observation(generation=2, suspend=False, previous=first, now=later, pod=starting.pod))
    assert [c.lastTransitionTime for c in second.conditions] == [NOW] * 6
    # AgentInitialized and Ready turn True: only those two move.
    ready_prev = second.model_copy(update={"acp": INITIALIZED})
    third = map_status(
        Observation(generation=2, suspend=False, previous=ready_prev, now=later, pod=starting.pod)
    )
    moved = {c.type for c in third.conditions if c.lastTransitionTime == later}
    assert moved == {"AgentInitialized", "Ready"}
    assert third.readyTime == later


def test_pod_facts_are_reported() -> None:
    initialized = next(c for c in CASES if c.id == "ACP initialized")
    status = map_status(
        Observation(
            generation=1,
            suspend=False,
            previous=initialized.previous,
            now=NOW,
            pod=initialized.pod,
            agentctl_port=9999,
        )
    )
    assert status.podName == "s-agent"
    assert status.podIP == "10.1.2.3"
    assert status.agentctlEndpoint == "http://10.1.2.3:9999"
    assert status.restartCount == 0
    assert status.startup is not None
    assert status.startup.agentctlReadySeconds == 10.0


def test_only_readiness_failures_since_agentctl_started_count() -> None:
    def event(message: str, at: str) -> dict[str, Any]:
        return {"message": message, "lastTimestamp": at}

    events = [
        event("Startup probe failed: connection refused", "2026-01-01T12:00:05Z"),
        event("Readiness probe failed: before the restart", "2026-01-01T11:00:00Z"),
        event("Readiness probe failed: timeout", "2026-01-01T12:00:10Z"),
        event("Readiness probe failed: statuscode: 503", "2026-01-01T12:00:20Z"),
    ]
    assert (
        latest_readiness_failure(map(EventView, events), "2026-01-01T12:00:00Z")
        == "Readiness probe failed: statuscode: 503"
    )
    assert latest_readiness_failure(map(EventView, events[:2]), "2026-01-01T12:00:00Z") is None
    assert latest_readiness_failure([], "2026-01-01T12:00:00Z") is None
    # Refused connections while agentctl's interpreter loads are its start, not a failure; still failing later is.
    loading = [event("Readiness probe failed: connection refused", "2026-01-01T12:00:02Z")]
    assert latest_readiness_failure(map(EventView, loading), "2026-01-01T12:00:00Z") is None
    still = [event("Readiness probe failed: connection refused", "2026-01-01T12:00:03Z")]
    assert latest_readiness_failure(map(EventView, still), "2026-01-01T12:00:00Z") is not None
