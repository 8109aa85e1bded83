"""The Events a status change posts: one for a phase change, a Warning for each condition newly in trouble, each
reason told once; and the Event that says how the drain before a pod's deletion ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from agentsession.api.models import AgentSessionStatus, Condition, StartupTimings
from agentsession.contract.wire import DrainResponse
from agentsession.controller.transitions import Event, drain_event, status_events

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def status(
    phase: str | None,
    startup: StartupTimings | None = None,
    **conditions: tuple[str, str],
) -> AgentSessionStatus:
    """`Kind=(reason, message)`; a condition is False unless its reason is Ready or Scheduled."""
    return AgentSessionStatus(
        phase=phase,
        startup=startup,
        conditions=[
            Condition(
                type=kind,
                status="True" if reason in {"Ready", "Scheduled"} else "False",
                reason=reason,
                message=message,
                lastTransitionTime=T0,
            )
            for kind, (reason, message) in conditions.items()
        ],
    )


@dataclass
class Case:
    id: str
    previous: AgentSessionStatus
    current: AgentSessionStatus
    events: list[Event] = field(default_factory=list)


def normal(reason: str, message: str) -> Event:
    return Event("Normal", reason, message)


def warning(reason: str, message: str) -> Event:
    return Event("Warning", reason, message)


CASES = [
    Case(
        "ready, with how long the start took",
        status("Starting", Ready=("Initializing", "starting")),
        status("Ready", StartupTimings(initializedSeconds=12.34), Ready=("Ready", "the agent is ready")),
        [normal("Ready", "Ready: the agent is ready (12.3s after the pod was created)")],
    ),
    Case(
        "ready, start time unknown",
        status("Starting", Ready=("Initializing", "starting")),
        status("Ready", StartupTimings(scheduledSeconds=1.0), Ready=("Ready", "the agent is ready")),
        [normal("Ready", "Ready: the agent is ready")],
    ),
    Case(
        "a start timing only matters to Ready",
        status("Pending", Ready=("Pending", "waiting")),
        status("Starting", StartupTimings(initializedSeconds=3.0), Ready=("PodInitializing", "init")),
        [normal("PodInitializing", "Starting: init")],
    ),
    Case(
        "a troubled reason makes the phase change a warning",
        status("Starting", Ready=("Initializing", "starting")),
        status(
            "Pending", AgentctlReady=("ImagePullBackOff", "back-off"), Ready=("ImagePullBackOff", "back-off")
        ),
        [warning("ImagePullBackOff", "Pending: back-off")],
    ),
    Case(
        "failed is a warning whatever its reason",
        status("Starting", Ready=("Initializing", "starting")),
        status("Failed", Ready=("SomethingElse", "gave up")),
        [warning("SomethingElse", "Failed: gave up")],
    ),
    Case(
        "no phase change, a condition newly in trouble",
        status("Starting", AgentInitialized=("Initializing", "starting"), Ready=("Initializing", "starting")),
        status(
            "Starting",
            AgentInitialized=("InitializeFailed", "agent exited"),
            Ready=("Initializing", "starting"),
        ),
        [warning("InitializeFailed", "AgentInitialized: agent exited")],
    ),
    Case(
        "a condition that appears in trouble",
        status("Starting"),
        status("Starting", AgentctlReady=("ProbeFailing", "503")),
        [warning("ProbeFailing", "AgentctlReady: 503")],
    ),
    Case(
        "trouble after a calm condition",
        status("Starting", PodScheduled=("Scheduled", "on node-1"), AgentctlReady=("Starting", "probe")),
        status("Starting", PodScheduled=("Scheduled", "on node-1"), AgentctlReady=("ProbeFailing", "503")),
        [warning("ProbeFailing", "AgentctlReady: 503")],
    ),
    Case(
        "new trouble after trouble already told",
        status("Starting", AgentctlReady=("ProbeFailing", "503"), AgentInitialized=("Initializing", "wait")),
        status(
            "Starting",
            AgentctlReady=("ProbeFailing", "503"),
            AgentInitialized=("AgentExited", "exit code 1"),
        ),
        [warning("AgentExited", "AgentInitialized: exit code 1")],
    ),
    Case(
        "trouble that was already told is not told again",
        status("Starting", AgentctlReady=("ProbeFailing", "503")),
        status("Starting", AgentctlReady=("ProbeFailing", "503 again")),
    ),
    Case(
        "one reason, one event, even on several conditions",
        status("Pending", Ready=("Pending", "waiting")),
        status(
            "Pending",
            PodScheduled=("Unschedulable", "no node"),
            AgentctlReady=("Unschedulable", "no node"),
            Ready=("Pending", "waiting"),
        ),
        [warning("Unschedulable", "PodScheduled: no node")],
    ),
    Case(
        "the phase event tells its reason for every condition",
        status("Starting", Ready=("Initializing", "starting")),
        status(
            "Failed",
            AgentctlReady=("CrashLoopBackOff", "keeps crashing"),
            Ready=("CrashLoopBackOff", "keeps crashing"),
        ),
        [warning("CrashLoopBackOff", "Failed: keeps crashing")],
    ),
    Case(
        "a phase change and another condition's trouble",
        status("Ready", Ready=("Ready", "ready")),
        status(
            "Starting",
            AgentctlReady=("Scheduled", "fine"),
            AgentInitialized=("AgentctlRestarted", "restarted (1)"),
            Ready=("AgentctlRestarted", "restarted (1)"),
        ),
        [warning("AgentctlRestarted", "Starting: restarted (1)")],
    ),
    Case(
        "a calm condition is never a warning",
        status("Starting", AgentctlReady=("Starting", "probe")),
        status("Starting", AgentctlReady=("ContainerCreating", "creating")),
    ),
    Case(
        "the kubelet catching up with a Secret that exists is no warning",
        status("Starting", AgentctlReady=("ContainerCreating", "creating")),
        status(
            "Starting",
            AgentctlReady=("CreateContainerConfigError", "failed to sync secret cache: timed out waiting"),
        ),
    ),
    Case(
        "a Secret that does not exist is",
        status("Starting", AgentctlReady=("ContainerCreating", "creating")),
        status("Starting", AgentctlReady=("CreateContainerConfigError", 'secret "creds" not found')),
        [warning("CreateContainerConfigError", 'AgentctlReady: secret "creds" not found')],
    ),
    Case(
        "no phase yet",
        status(None),
        status(None, Ready=("PodNotCreated", "waiting")),
    ),
    Case(
        "a phase without a Ready condition",
        status(None),
        status("Pending"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_status_change_tells_its_story(case: Case) -> None:
    assert status_events(case.previous, case.current) == case.events


def _drain(outcome: str, **fields: object) -> DrainResponse:
    values: dict[str, object] = {
        "outcome": outcome,
        "waited_seconds": 0.0,
        "timeout_seconds": 20.0,
        "cancelled_permissions": 0,
    }
    values.update(fields)
    return DrainResponse.model_validate(values)


@pytest.mark.parametrize(
    ("result", "event"),
    [
        (_drain("idle"), None),
        (
            _drain("finished", waited_seconds=4.26, stop_reason="end_turn"),
            normal(
                "TurnFinished",
                "the running turn finished 4.3s into the drain (stop reason end_turn); stopping the pod",
            ),
        ),
        (
            _drain("cancelled", waited_seconds=20.0, timeout_seconds=20.0),
            warning(
                "TurnCancelled",
                "the turn was still running at lifecycle.drainTimeout (20s) and was cancelled through ACP; "
                "stopping the pod",
            ),
        ),
        (
            _drain("cancelled", timeout_seconds=1.5, cancelled_permissions=1),
            warning(
                "TurnCancelled",
                "the turn was still running at lifecycle.drainTimeout (1.5s) and was cancelled through ACP; "
                "1 pending permission request answered as cancelled; stopping the pod",
            ),
        ),
        (
            _drain("cancelled", cancelled_permissions=3),
            warning(
                "TurnCancelled",
                "the turn was still running at lifecycle.drainTimeout (20s) and was cancelled through ACP; "
                "3 pending permission requests answered as cancelled; stopping the pod",
            ),
        ),
    ],
    ids=["idle", "finished", "cancelled", "cancelled with a permission", "cancelled with permissions"],
)
def test_a_drain_tells_how_the_running_turn_ended(result: DrainResponse, event: Event | None) -> None:
    assert drain_event(result) == event
