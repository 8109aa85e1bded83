"""What the status tells a person reading `kubectl describe`: each condition's reason and message in each pod
situation, the facts of the pod (restarts, endpoint, start timings), and when the operator must start ACP."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsession.api.models import AcpStatus, AgentSessionStatus
from agentsession.api.views import EventView
from agentsession.controller.status_mapper import (
    Observation,
    agentctl_restart_count,
    describe_exit,
    latest_readiness_failure,
    map_status,
    readiness_pending_since,
    start_due,
    termination_tail,
)
from tests.support.pod_bodies import CREATED, NOW, UID, pod_body

SCHEDULED = [{"type": "PodScheduled", "status": "True"}]
RUNNING = {"state": {"running": {"startedAt": CREATED}}, "started": True, "restartCount": 0}
READY = {**RUNNING, "ready": True}
EXIT = {"exitCode": 1, "reason": "Error", "message": "loading\nError: no API key\n"}
SESSION = AcpStatus(sessionId="sess-1", podUID=UID, agentctlRestartCount=0)


def pod(*, conditions: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    return pod_body(conditions=SCHEDULED if conditions is None else conditions, **fields)


@dataclass
class Case:
    id: str
    pod: dict[str, Any] | None
    says: dict[str, tuple[str, str]]
    acp: AcpStatus | None = None
    suspend: bool = False
    deleting: bool = False
    probe_message: str | None = None
    previous: AgentSessionStatus = field(default_factory=AgentSessionStatus)


CASES = [
    Case(
        "no pod yet",
        None,
        {
            "PodScheduled": ("PodNotCreated", "waiting for the operator to create the pod"),
            "Suspended": ("Active", "the session runs a pod"),
        },
    ),
    Case(
        "suspended",
        None,
        {
            "PodScheduled": ("Suspended", "spec.suspend is true: no pod runs"),
            "Suspended": ("Suspended", "spec.suspend is true: no pod runs; the workspace is kept"),
            "Ready": ("Suspended", "spec.suspend is true: the agent is not running"),
        },
        suspend=True,
    ),
    Case(
        "being deleted",
        pod(agentctl=READY, agent=RUNNING),
        {"Ready": ("Terminating", "the session is being deleted")},
        acp=SESSION,
        deleting=True,
    ),
    Case(
        "scheduled, agentctl not reported yet",
        pod(),
        {
            "PodScheduled": ("Scheduled", "pod s-agent is assigned to node node-1"),
            "AgentctlReady": ("ContainerCreating", "waiting for the kubelet to start agentctl"),
            "AgentInitialized": ("AgentctlNotReady", "waiting for agentctl to become ready"),
        },
    ),
    Case(
        "agentctl waiting, the kubelet says why",
        pod(agentctl={"state": {"waiting": {"reason": "ErrImagePull", "message": "pull access denied"}}}),
        {"AgentctlReady": ("ErrImagePull", "pull access denied")},
    ),
    Case(
        "agentctl waiting, the kubelet does not say why",
        pod(agentctl={"state": {"waiting": {"reason": "PodInitializing"}}}),
        {"AgentctlReady": ("PodInitializing", "agentctl is waiting: PodInitializing")},
    ),
    Case(
        "agentctl waiting without even a reason",
        pod(agentctl={"state": {"waiting": {"message": "hold on"}}}),
        {"AgentctlReady": ("Waiting", "hold on")},
    ),
    Case(
        "agentctl crash-looping",
        pod(
            agentctl={
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}},
            }
        ),
        {
            "AgentctlReady": (
                "CrashLoopBackOff",
                "agentctl keeps crashing (restarts: 3); last exit code 2, reason Error",
            )
        },
    ),
    Case(
        "agentctl crash-looping, nothing known of its last run",
        pod(agentctl={"state": {"waiting": {"reason": "CrashLoopBackOff"}}}),
        {"AgentctlReady": ("CrashLoopBackOff", "agentctl keeps crashing (restarts: 0)")},
    ),
    Case(
        "agentctl ended",
        pod(agentctl={"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, "restartCount": 0}),
        {"AgentctlReady": ("Terminated", "agentctl ended (exit code 137, reason OOMKilled)")},
    ),
    Case(
        "agentctl running, not started",
        pod(agentctl={"state": {"running": {}}, "started": False}),
        {"AgentctlReady": ("Starting", "agentctl is running; waiting for its startup probe (GET /health)")},
    ),
    Case(
        "agentctl started, readiness not reported",
        pod(agentctl=RUNNING),
        {
            "AgentctlReady": (
                "Starting",
                "agentctl has started; waiting for its readiness probe (GET /health)",
            )
        },
    ),
    Case(
        "agentctl failing its readiness probe",
        pod(agentctl={**RUNNING, "restartCount": 2}),
        {
            "AgentctlReady": (
                "ProbeFailing",
                "agentctl is running but its readiness probe (GET /health) fails: Readiness probe failed: 503 "
                "(restarts: 2)",
            )
        },
        probe_message="Readiness probe failed: 503",
    ),
    Case(
        "agentctl failing its readiness probe, restarts not reported",
        pod(agentctl={"state": {"running": {}}, "started": True}),
        {
            "AgentctlReady": (
                "ProbeFailing",
                "agentctl is running but its readiness probe (GET /health) fails: x (restarts: 0)",
            )
        },
        probe_message="x",
    ),
    Case(
        "agentctl ready, the agent container still being created",
        pod(agentctl=READY, agent={"state": {"waiting": {"reason": "ContainerCreating"}}}),
        {
            "AgentctlReady": ("ProbeSucceeded", "agentctl answers its readiness probe (GET /health)"),
            "AgentInitialized": ("Initializing", "starting the ACP session through agentctl"),
        },
    ),
    Case(
        "agentctl ready, the agent container waiting for the init containers",
        pod(agentctl=READY, agent={"state": {"waiting": {"reason": "PodInitializing"}}}),
        {"AgentInitialized": ("Initializing", "starting the ACP session through agentctl")},
    ),
    Case(
        "the agent's image cannot be pulled",
        pod(agentctl=READY, agent={"state": {"waiting": {"reason": "ImagePullBackOff"}}}),
        {"AgentInitialized": ("ImagePullBackOff", "the agent container is waiting: ImagePullBackOff")},
    ),
    Case(
        "the agent crash-looping",
        pod(
            agentctl=READY,
            agent={
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": EXIT},
            },
        ),
        {
            "AgentInitialized": (
                "CrashLoopBackOff",
                "the agent container keeps crashing (restarts: 4); last exit code 1, reason Error: loading | "
                "Error: no API key",
            )
        },
        acp=SESSION,
    ),
    Case(
        "the agent exited before ACP started, restarts not reported",
        pod(agentctl=READY, agent={"state": {"running": {}}, "lastState": {"terminated": EXIT}}),
        {
            "AgentInitialized": (
                "AgentExited",
                "the agent exited before its ACP session started (exit code 1, reason Error: loading | "
                "Error: no API key; restarts: 0)",
            )
        },
    ),
    Case(
        "the agent is exiting now: its current exit, not an older one",
        pod(
            agentctl=READY,
            agent={
                "restartCount": 1,
                "state": {"terminated": {"exitCode": 3, "reason": "Error"}},
                "lastState": {"terminated": EXIT},
            },
        ),
        {
            "AgentInitialized": (
                "AgentExited",
                "the agent exited before its ACP session started (exit code 3, reason Error; restarts: 1)",
            )
        },
    ),
    Case(
        "ready, in a mode",
        pod(agentctl=READY, agent=RUNNING),
        {
            "AgentInitialized": ("Initialized", "ACP session sess-1 is ready, mode code"),
            "Ready": ("Ready", "the agent is ready for prompts"),
        },
        acp=SESSION.model_copy(update={"currentModeId": "code"}),
    ),
    Case(
        "ready, without modes",
        pod(agentctl=READY, agent=RUNNING),
        {"AgentInitialized": ("Initialized", "ACP session sess-1 is ready")},
        acp=SESSION,
    ),
    Case(
        "agentctl restarted under a running session",
        pod(agentctl={**READY, "restartCount": 2}, agent=RUNNING),
        {"AgentInitialized": ("AgentctlRestarted", "agentctl restarted (2); resuming the ACP session")},
        acp=SESSION,
    ),
    Case(
        "agentctl ready, the agent container not reported yet",
        pod(agentctl=READY),
        {"AgentInitialized": ("Initializing", "starting the ACP session through agentctl")},
    ),
    Case(
        "containers reported without a state",
        pod(agentctl={"started": True, "restartCount": 0}, agent={"restartCount": 0}),
        {
            "AgentctlReady": (
                "Starting",
                "agentctl has started; waiting for its readiness probe (GET /health)",
            )
        },
    ),
    Case(
        "a ready agentctl, an agent reported without a state",
        pod(agentctl=READY, agent={"restartCount": 0}),
        {"AgentInitialized": ("Initialized", "ACP session sess-1 is ready")},
        acp=SESSION,
    ),
    Case(
        "the pod failed and says why",
        pod(phase="Failed", reason="UnexpectedAdmissionError", message="allocate failed"),
        {"AgentctlReady": ("PodFailed", "allocate failed")},
    ),
    Case(
        "the pod failed without a word",
        pod(phase="Failed"),
        {"AgentctlReady": ("PodFailed", "the pod failed")},
    ),
    Case(
        "the pod failed when the agent ended",
        pod(phase="Failed", agent={"state": {"terminated": EXIT}}),
        {
            "AgentctlReady": (
                "PodFailed",
                "the pod failed: the agent container ended (exit code 1, reason Error: loading | Error: no API key)",
            )
        },
    ),
    Case(
        "the pod's own words win over the agent's exit",
        pod(phase="Failed", reason="Evicted", message="low on memory", agent={"state": {"terminated": EXIT}}),
        {"AgentctlReady": ("Evicted", "low on memory")},
    ),
    Case(
        "the pod ran out of time",
        pod(phase="Failed", reason="DeadlineExceeded", message="active deadline"),
        {"AgentctlReady": ("DeadlineExceeded", "active deadline")},
    ),
    Case(
        "a failed pod's init container is not the agent",
        pod(phase="Failed", agentctl={"state": {"terminated": EXIT}}),
        {"AgentctlReady": ("PodFailed", "the pod failed")},
    ),
]


def _observe(case: Case) -> Observation:
    previous = case.previous.model_copy(update={"acp": case.acp}) if case.acp else case.previous
    return Observation(
        generation=1,
        suspend=case.suspend,
        previous=previous,
        now=NOW,
        pod=case.pod,
        deleting=case.deleting,
        probe_message=case.probe_message,
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_condition_says_why_in_words(case: Case) -> None:
    status = map_status(_observe(case))
    for kind, (reason, message) in case.says.items():
        condition = status.condition(kind)  # type: ignore[arg-type]
        assert condition is not None
        assert (condition.reason, condition.message) == (reason, message), kind


def test_the_phase_of_a_session_being_deleted_is_terminating() -> None:
    deleting = next(c for c in CASES if c.deleting)
    assert map_status(_observe(deleting)).phase == "Terminating"


def test_restarts_add_up_over_all_containers() -> None:
    status = map_status(
        _observe(Case("x", pod(agentctl={**READY, "restartCount": 2}, agent={"state": {"running": {}}}), {}))
    )
    assert status.restartCount == 2
    both = pod(agentctl={**READY, "restartCount": 2}, agent={**RUNNING, "restartCount": 3})
    assert map_status(_observe(Case("x", both, {}))).restartCount == 5
    assert map_status(_observe(Case("x", pod(conditions=[]), {}))).restartCount == 0
    assert map_status(_observe(Case("x", None, {}))).restartCount is None


def test_the_pod_is_named_and_reached_through_its_ip() -> None:
    running = pod(agentctl=READY, agent=RUNNING, podIP="10.1.2.3", startTime="2026-01-01T11:59:51Z")
    status = map_status(_observe(Case("x", running, {})))
    assert (status.podName, status.podUID) == ("s-agent", UID)
    assert status.agentctlEndpoint == "http://10.1.2.3:9999"
    assert status.startTime == datetime(2026, 1, 1, 11, 59, 51, tzinfo=UTC)
    waiting = map_status(_observe(Case("x", pod(), {})))
    assert (waiting.podIP, waiting.agentctlEndpoint, waiting.startTime) == (None, None, None)
    gone = map_status(_observe(Case("x", None, {})))
    assert (gone.podName, gone.podUID) == (None, None)


def test_start_timings_count_from_the_pod_and_the_acp_start_of_this_pod_only() -> None:
    ready = pod(agentctl=READY, agent=RUNNING)
    acp = SESSION.model_copy(update={"initializedTime": NOW - timedelta(seconds=2.5)})
    later = NOW + timedelta(microseconds=400)
    observation = Observation(
        generation=1, suspend=False, previous=AgentSessionStatus(acp=acp), now=later, pod=ready
    )
    startup = map_status(observation).startup
    assert startup is not None
    # Rounded to milliseconds: what is measured, not the clock's noise.
    assert (startup.scheduledSeconds, startup.agentctlReadySeconds, startup.initializedSeconds) == (
        10.0,
        10.0,
        7.5,
    )

    other_pod = acp.model_copy(update={"podUID": "older-pod"})
    observation = Observation(
        generation=1, suspend=False, previous=AgentSessionStatus(acp=other_pod), now=NOW, pod=ready
    )
    startup = map_status(observation).startup
    assert startup is not None
    assert startup.initializedSeconds is None

    restarted = pod(agentctl={**READY, "restartCount": 1}, agent=RUNNING)
    observation = Observation(
        generation=1, suspend=False, previous=AgentSessionStatus(acp=acp), now=NOW, pod=restarted
    )
    startup = map_status(observation).startup
    assert startup is not None
    assert startup.initializedSeconds is None  # not initialized now: agentctl restarted under the session

    starting = Observation(
        generation=1, suspend=False, previous=AgentSessionStatus(), now=NOW, pod=pod(agentctl=RUNNING)
    )
    startup = map_status(starting).startup
    assert startup is not None
    assert (startup.scheduledSeconds, startup.agentctlReadySeconds, startup.initializedSeconds) == (
        10.0,
        None,
        None,
    )
    assert map_status(_observe(Case("x", None, {}))).startup is None


@pytest.mark.parametrize(
    ("situation", "due"),
    [
        (pod(agentctl=READY, agent=RUNNING), True),  # agentctl ready, ACP not started on this pod
        (pod(agentctl=RUNNING, agent=RUNNING), False),  # scheduled, but agentctl not ready yet
        (pod(conditions=[]), False),
        (None, False),
    ],
    ids=["agentctl ready", "agentctl starting", "not scheduled", "no pod"],
)
def test_acp_is_started_once_agentctl_is_ready(situation: dict[str, Any] | None, due: bool) -> None:
    observation = Observation(
        generation=1, suspend=False, previous=AgentSessionStatus(), now=NOW, pod=situation
    )
    assert start_due(observation) is due


@pytest.mark.parametrize(
    ("agentctl", "since"),
    [
        (RUNNING, CREATED),
        ({"state": {"running": {}}, "started": True}, ""),
        (READY, None),  # ready: nothing pending
        ({"state": {"running": {}}, "started": False}, None),  # not started: the startup probe's business
        ({"state": {"waiting": {}}, "started": True}, None),  # not running
        (None, None),
    ],
    ids=["started, not ready", "start time unknown", "ready", "not started", "not running", "no agentctl"],
)
def test_readiness_is_pending_only_for_a_started_running_agentctl(
    agentctl: dict[str, Any] | None, since: str | None
) -> None:
    assert readiness_pending_since(pod(agentctl=agentctl)) == since


@pytest.mark.parametrize(
    ("agentctl", "restarts"),
    [({**READY, "restartCount": 4}, 4), (READY, 0), ({"state": {}}, 0), (None, 0)],
)
def test_agentctl_restarts_are_read_from_its_own_status(
    agentctl: dict[str, Any] | None, restarts: int
) -> None:
    assert agentctl_restart_count(pod(agentctl=agentctl, agent={**RUNNING, "restartCount": 9})) == restarts


@pytest.mark.parametrize(
    ("terminated", "text"),
    [
        ({"exitCode": 1, "reason": "Error", "message": "boom\n"}, "exit code 1, reason Error: boom"),
        ({"exitCode": 1}, "exit code 1, reason unknown"),
        ({"exitCode": 1, "reason": "Error", "message": "  \n "}, "exit code 1, reason Error"),
    ],
)
def test_an_exit_is_told_by_code_reason_and_last_words(terminated: dict[str, Any], text: str) -> None:
    assert describe_exit(terminated) == text


def test_a_termination_message_of_exactly_the_limit_is_kept_whole() -> None:
    assert termination_tail("x" * 1000) == "x" * 1000
    assert termination_tail("x" * 1001) == "..." + "x" * 1000


def test_a_readiness_failure_counts_only_after_the_first_probes() -> None:
    def event(message: str, at: str) -> EventView:
        return EventView({"message": message, "lastTimestamp": at})

    start = "2026-01-01T12:00:00Z"
    early = event("Readiness probe failed: connection refused", "2026-01-01T12:00:02Z")
    later = event("Readiness probe failed: 503", "2026-01-01T12:00:09Z")
    assert latest_readiness_failure([early], start) is None
    assert latest_readiness_failure([early, later], start) == "Readiness probe failed: 503"
    assert latest_readiness_failure([early], "") == "Readiness probe failed: connection refused"


def test_ready_time_is_only_set_while_ready() -> None:
    ready = Case("x", pod(agentctl=READY, agent=RUNNING), {}, acp=SESSION)
    assert map_status(_observe(ready)).readyTime == NOW
    starting = Case("x", pod(agentctl=RUNNING, agent=RUNNING), {})
    assert map_status(_observe(starting)).readyTime is None


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    first = map_status(_observe(Case("x", pod(agentctl=RUNNING, agent=RUNNING), {})))
    later = NOW + timedelta(seconds=30)
    again = map_status(
        Observation(
            generation=2, suspend=False, previous=first, now=later, pod=pod(agentctl=READY, agent=RUNNING)
        )
    )
    moved = {c.type: c.lastTransitionTime for c in again.conditions}
    # AgentctlReady turned True; the others kept their status, and their times.
    assert moved == {
        "PodScheduled": NOW,
        "AgentctlReady": later,
        "AgentInitialized": NOW,
        "Suspended": NOW,
        "Ready": NOW,
        "BudgetExhausted": NOW,
    }
    assert {c.observedGeneration for c in again.conditions} == {2}
