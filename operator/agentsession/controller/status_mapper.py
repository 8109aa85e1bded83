"""Observed session + pod (+ what agentctl reported) → the whole status. Pure: no I/O, time passed in.

Conditions follow the Kubernetes API conventions: every condition is always present, reasons are CamelCase
and say why not, and lastTransitionTime moves only when a condition's status changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agentsession.api import reasons
from agentsession.api.constants import AGENT_CONTAINER, AGENTCTL_CONTAINER
from agentsession.api.egress import BUDGET_CONDITION, Budget, Usage, exhausted
from agentsession.api.manifest import Manifest
from agentsession.api.models import (
    AcpStatus,
    AgentSessionStatus,
    Condition,
    ConditionStatus,
    ConditionType,
    Phase,
    StartupTimings,
)
from agentsession.api.times import parse_time
from agentsession.api.views import ContainerStatusView, EventView, PodView
from agentsession.controller.rejections import Rejection

CONDITION_ORDER: tuple[ConditionType, ...] = (
    "PodScheduled",
    "AgentctlReady",
    "AgentInitialized",
    "Suspended",
    "Ready",
    BUDGET_CONDITION,
)
READINESS_FAILED = "Readiness probe failed"
# A container's termination message (its last output, with FallbackToLogsOnError) is cut to what a condition
# message and an Event can carry and a person can read at a glance.
TERMINATION_TAIL_LINES = 5
TERMINATION_TAIL_CHARS = 1000
# The kubelet's own caches of Secrets and ConfigMaps behind the API server (a busy one): the kubelet retries, and
# the container starts once they catch up. Not a failure of the session, unlike a Secret that does not exist.
KUBELET_CACHE_LAG = re.compile(r"failed to sync (secret|configmap) cache")
# A failed pod's own reason, kept when it is one of these; any other failure is PodFailed.
KEPT_FAILURES = frozenset({reasons.EVICTED, reasons.DEADLINE_EXCEEDED})
# Waiting reasons of the agent container that say no more than that agentctl is not ready yet.
AGENT_WAITING_FOR_AGENTCTL = frozenset({reasons.CONTAINER_CREATING, reasons.POD_INITIALIZING})


@dataclass(frozen=True)
class Observation:
    """Everything the mapper looks at. `pod` is the Pod as the API returns it (camelCase JSON); the mapper reads
    it through one `PodView`."""

    generation: int
    suspend: bool
    previous: AgentSessionStatus
    now: datetime
    pod: Manifest | None = None
    deleting: bool = False
    agentctl_port: int = 9999
    spec_error: str | None = None
    probe_message: str | None = None
    rejection: Rejection | None = None
    # Why the pod is not replaced yet although its template changed (a turn runs); shown as RestartPending.
    restart_pending: str | None = None
    # How the first pod came, when this reconcile decided it; otherwise the previous status says.
    start: StartupTimings | None = None
    # agentctl's last error, read when the agent container stopped being ready after its session started.
    agent_error: str | None = None
    # Why no pod can be made while the egress proxy has no address (`pod_builder.EgressProxyUnavailable`).
    egress_unavailable: str | None = None
    # The session's budget, each limit from its spec, its namespace's annotation or the operator's default.
    budget: Budget = field(default_factory=Budget)


@dataclass(frozen=True)
class _State:
    status: ConditionStatus
    reason: str
    message: str

    @property
    def ok(self) -> bool:
        return self.status == "True"


def _view(pod: Manifest | PodView) -> PodView:
    # The mapper wraps its pod once and hands the view on; the reconciler's calls pass the pod it observed.
    return pod if isinstance(pod, PodView) else PodView(pod)


# Event times have whole seconds; agentctl listens within about a second of its start.
STARTUP_GRACE = timedelta(seconds=3)


def agentctl_restart_count(pod: Manifest | PodView) -> int:
    status = _view(pod).init_container(AGENTCTL_CONTAINER)
    return status.restart_count if status else 0


def agent_restart_count(pod: Manifest | PodView) -> int:
    status = _view(pod).container(AGENT_CONTAINER)
    return status.restart_count if status else 0


def latest_readiness_failure(events: Iterable[EventView], since: str) -> str | None:
    """The newest kubelet "Readiness probe failed" message among `events` later than STARTUP_GRACE after `since`
    (when the running agentctl started): failures of an earlier run do not count, nor the refused connections of
    the first probes, which run while agentctl's interpreter is still loading."""
    start = parse_time(since)
    failures = [
        (moment, event.message)
        for event in events
        if event.message.startswith(READINESS_FAILED)
        and (moment := parse_time(event.last_seen)) is not None
        and (start is None or moment >= start + STARTUP_GRACE)
    ]
    return max(failures)[1] if failures else None


def readiness_pending_since(pod: Manifest | PodView) -> str | None:
    """When the running, started agentctl that is not ready started; None when that is not the case."""
    status = _view(pod).init_container(AGENTCTL_CONTAINER)
    if not status or status.ready or not status.started:
        return None
    return status.running_since


def agent_unready_since(pod: Manifest | PodView, acp: AcpStatus | None) -> str | None:
    """When the running agent container stopped being ready, if that was after its ACP session started on this
    pod (the pod's ContainersReady turned False since); None otherwise. Before the session starts, the agent is
    not ready yet; that is no loss."""
    view = _view(pod)
    agent = view.container(AGENT_CONTAINER)
    if agent is None or agent.ready or not agent.running:
        return None
    if view.deleting:
        return None  # its containers are being stopped
    if acp is None or acp.initializedTime is None or acp.podUID != view.uid:
        return None
    condition = view.condition("ContainersReady")
    since = parse_time(condition.last_transition_time) if condition else None
    if condition is None or condition.status != "False" or since is None or since <= acp.initializedTime:
        return None
    return condition.last_transition_time


def _node_not_reporting(pod: PodView) -> _State | None:
    """The node controller's mark on a pod whose node stopped reporting (its kubelet stopped, or the node is cut
    off): the pod's Ready turned False while the kubelet's own ContainersReady stays True, a pair the kubelet never
    writes itself except for readiness gates. What the containers last reported is then out of date."""
    ready, containers = pod.condition("Ready"), pod.condition("ContainersReady")
    if not ready or not containers or ready.status != "False" or not containers.true:
        return None
    if ready.reason == "ReadinessGatesNotReady":
        return None
    node = pod.node_name or "of the pod"
    since = f" since {ready.last_transition_time}" if ready.last_transition_time else ""
    return _State(
        "Unknown",
        reasons.NODE_NOT_READY,
        f"node {node} stopped reporting{since}: agentctl and the agent may still run, but nothing confirms it "
        "until its kubelet reports again",
    )


def _no_pod(obs: Observation) -> _State:
    if obs.spec_error:
        return _State("False", reasons.INVALID_SPEC, obs.spec_error)
    if obs.egress_unavailable:
        return _State("False", reasons.EGRESS_PROXY_UNAVAILABLE, obs.egress_unavailable)
    if obs.rejection:
        return _State("False", obs.rejection.reason, obs.rejection.message)
    if obs.suspend:
        return _State("False", reasons.SUSPENDED, "spec.suspend is true: no pod runs")
    if obs.previous.podUID:
        return _State(
            "False",
            reasons.POD_DELETED,
            f"pod {obs.previous.podName} was deleted outside the operator; it is recreated",
        )
    return _State("False", reasons.POD_NOT_CREATED, "waiting for the operator to create the pod")


def termination_tail(message: str) -> str:
    """The last few non-empty lines of a termination message, joined on one line and bounded."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    tail = " | ".join(lines[-TERMINATION_TAIL_LINES:])
    return tail if len(tail) <= TERMINATION_TAIL_CHARS else "..." + tail[-TERMINATION_TAIL_CHARS:]


def describe_exit(terminated: Manifest) -> str:
    """`exit code 1, reason Error: <the container's last words>` for a terminated container state."""
    text = f"exit code {terminated.get('exitCode')}, reason {terminated.get('reason') or 'unknown'}"
    message = str(terminated.get("message") or "")
    return f"{text}: {termination_tail(message)}" if message.strip() else text


def _pod_failed(pod: PodView) -> _State | None:
    reason = pod.failed_reason
    if reason is None:
        return None
    message = pod.message or "the pod failed"
    agent = pod.container(AGENT_CONTAINER)
    exited = agent.latest_exit if agent else None
    if exited and not pod.message:
        message = f"the pod failed: the agent container ended ({describe_exit(exited)})"
    return _State("False", reason if reason in KEPT_FAILURES else reasons.POD_FAILED, message)


def _scheduled(obs: Observation, pod: PodView | None) -> _State:
    if pod is None:
        return _no_pod(obs)
    name = pod.name
    if pod.deleting:
        return _State("False", reasons.POD_TERMINATING, f"pod {name} is terminating")
    condition = pod.condition("PodScheduled")
    if condition and condition.true:
        return _State("True", reasons.SCHEDULED, f"pod {name} is assigned to node {pod.node_name or ''}")
    if condition and condition.reason == reasons.UNSCHEDULABLE:
        return _State("False", reasons.UNSCHEDULABLE, condition.message or f"pod {name} cannot be scheduled")
    return _State("False", reasons.POD_PENDING, f"pod {name} is waiting for the scheduler")


def _describe_last_exit(status: ContainerStatusView) -> str:
    terminated = status.last_terminated
    return f"; last {describe_exit(terminated)}" if terminated else ""


def _waiting(status: ContainerStatusView, what: str) -> _State | None:
    waiting = status.waiting
    if not waiting:
        return None
    reason = waiting.get("reason") or reasons.WAITING
    message = waiting.get("message") or f"{what} is waiting: {reason}"
    if reason == reasons.CRASH_LOOP_BACK_OFF:
        message = f"{what} keeps crashing (restarts: {status.restart_count}){_describe_last_exit(status)}"
    return _State("False", reason, message)


def _agentctl_ready(obs: Observation, pod: PodView | None, scheduled: _State) -> _State:
    if pod is None:
        return scheduled
    failed = _pod_failed(pod)
    if failed:
        return failed
    if not scheduled.ok:
        return scheduled
    lost = _node_not_reporting(pod)
    if lost:
        return lost
    status = pod.init_container(AGENTCTL_CONTAINER)
    if status is None:
        return _State("False", reasons.CONTAINER_CREATING, "waiting for the kubelet to start agentctl")
    if status.ready:
        return _State("True", reasons.PROBE_SUCCEEDED, "agentctl answers its readiness probe (GET /health)")
    waiting = _waiting(status, "agentctl")
    if waiting:
        return waiting
    terminated = status.terminated
    if terminated:
        return _State("False", reasons.TERMINATED, f"agentctl ended ({describe_exit(terminated)})")
    if not status.started:
        return _State(
            "False", reasons.STARTING, "agentctl is running; waiting for its startup probe (GET /health)"
        )
    if not obs.probe_message:
        # Between the startup probe passing and the first readiness check, not ready is not a failure.
        return _State(
            "False", reasons.STARTING, "agentctl has started; waiting for its readiness probe (GET /health)"
        )
    return _State(
        "False",
        reasons.PROBE_FAILING,
        f"agentctl is running but its readiness probe (GET /health) fails: {obs.probe_message} "
        f"(restarts: {status.restart_count})",
    )


def _agent_initialized(obs: Observation, pod: PodView | None, agentctl: _State) -> _State:
    agent = pod.container(AGENT_CONTAINER) if pod is not None else None
    waiting = _waiting(agent, "the agent container") if agent else None
    if agentctl.reason == reasons.NODE_NOT_READY:
        return agentctl
    if waiting and waiting.reason not in AGENT_WAITING_FOR_AGENTCTL:
        return waiting
    if not agentctl.ok:
        return _State("False", reasons.AGENTCTL_NOT_READY, "waiting for agentctl to become ready")
    assert pod is not None  # agentctl is ready only in a pod
    acp = obs.previous.acp
    restarts = agentctl_restart_count(pod)
    not_started = acp is None or acp.podUID != pod.uid
    exited = agent.latest_exit if agent else None
    if agent and exited and (not_started or (acp is not None and acp.lastError)):
        # What the agent printed as it died says more than agentctl's view of a closed pipe.
        return _State(
            "False",
            reasons.AGENT_EXITED,
            f"the agent exited before its ACP session started ({describe_exit(exited)}; "
            f"restarts: {agent.restart_count})",
        )
    if acp is None or not_started:
        return _State("False", reasons.INITIALIZING, "starting the ACP session through agentctl")
    if acp.agentctlRestartCount != restarts:
        return _State(
            "False", reasons.AGENTCTL_RESTARTED, f"agentctl restarted ({restarts}); resuming the ACP session"
        )
    if agent and acp.agentRestartCount is not None and acp.agentRestartCount != agent_restart_count(pod):
        ended = f"{describe_exit(exited)}; " if exited else ""
        return _State(
            "False",
            reasons.AGENT_RESTARTED,
            f"the agent container restarted ({ended}restarts: {agent.restart_count}); "
            "resuming the ACP session",
        )
    since = agent_unready_since(pod, acp)
    if since is not None:
        why = f" ({termination_tail(obs.agent_error)})" if obs.agent_error else ""
        return _State(
            "False",
            reasons.AGENT_NOT_ANSWERING,
            f"the agent container runs, but agentctl has had no working ACP connection to it since {since}{why}; "
            "the session resumes once the agent answers again, as it does after a restart of its container",
        )
    if acp.lastError:
        return _State("False", reasons.INITIALIZE_FAILED, acp.lastError)
    mode = f", mode {acp.currentModeId}" if acp.currentModeId else ""
    return _State("True", reasons.INITIALIZED, f"ACP session {acp.sessionId} is ready{mode}")


def _summary(obs: Observation, states: dict[ConditionType, _State]) -> _State:
    if obs.deleting:
        return _State("False", reasons.TERMINATING, "the session is being deleted")
    if obs.suspend:
        return _State("False", reasons.SUSPENDED, "spec.suspend is true: the agent is not running")
    for kind in ("PodScheduled", "AgentctlReady", "AgentInitialized"):
        state = states[kind]
        if not state.ok:
            return state
    return _State("True", reasons.READY, "the agent is ready for prompts")


def _phase(obs: Observation, ready: _State) -> Phase:
    if obs.deleting:
        return "Terminating"
    if obs.suspend:
        return "Suspended"
    if ready.ok:
        return "Ready"
    if ready.status == "Unknown":
        return "Unknown"
    if reasons.is_in(ready.reason, reasons.FAILED) and not KUBELET_CACHE_LAG.match(ready.message):
        return "Failed"
    if reasons.is_in(ready.reason, reasons.PENDING):
        return "Pending"
    return "Starting"


def _condition(obs: Observation, kind: ConditionType, state: _State) -> Condition:
    previous = obs.previous.condition(kind)
    changed = previous is None or previous.status != state.status
    return Condition(
        type=kind,
        status=state.status,
        reason=state.reason,
        message=state.message,
        lastTransitionTime=obs.now if changed or previous is None else previous.lastTransitionTime,
        observedGeneration=obs.generation,
    )


def _conditions(obs: Observation, states: dict[ConditionType, _State]) -> list[Condition]:
    result = [_condition(obs, kind, states[kind]) for kind in CONDITION_ORDER]
    if obs.restart_pending:
        # Present only while a restart waits; Ready stays as it is, the session keeps serving until then.
        result.append(
            _condition(obs, "RestartPending", _State("True", reasons.TURN_RUNNING, obs.restart_pending))
        )
    return result


def _limits(budget: Budget) -> str:
    limits = [
        f"{name} {'$' if name == 'maxCostUSD' else ''}{value}"
        for name, value in budget.model_dump(exclude_none=True).items()
    ]
    return ", ".join(limits)


def budget_state(usage: Usage | None, budget: Budget) -> _State:
    """BudgetExhausted from the metered usage (status.usage, the egress proxy's) and the effective budget: when
    spent, `exhausted`'s sentence (the limit reached); within it, the limits, not the usage, so that the message
    does not change with every model call."""
    spent = exhausted(usage, budget)
    if spent is not None:
        return _State("True", reasons.BUDGET_EXHAUSTED, spent)
    limits = _limits(budget)
    return _State(
        "False",
        reasons.WITHIN_BUDGET,
        f"within the budget ({limits})" if limits else "no budget limits this session",
    )


def _seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    return round((end - start).total_seconds(), 3) if start and end else None


_START_FIELDS = {"source", "pool", "member", "reason", "message"}


def _startup(pod: PodView | None, conditions: list[Condition], obs: Observation) -> StartupTimings | None:
    known = obs.start or obs.previous.startup
    start = known.model_dump(include=_START_FIELDS, exclude_none=True) if known is not None else {}
    if pod is None:
        return StartupTimings(**start) if start else None
    created = parse_time(pod.created_at)
    by_type = {c.type: c for c in conditions}

    def when_true(kind: ConditionType) -> datetime | None:
        condition = by_type[kind]
        return condition.lastTransitionTime if condition.status == "True" else None

    acp = obs.previous.acp
    initialized = acp.initializedTime if acp and acp.podUID == pod.uid else None
    return StartupTimings(
        **start,
        scheduledSeconds=_seconds_between(created, when_true("PodScheduled")),
        agentctlReadySeconds=_seconds_between(created, when_true("AgentctlReady")),
        initializedSeconds=_seconds_between(
            created, initialized if by_type["AgentInitialized"].status == "True" else None
        ),
    )


def _observed_pod(obs: Observation) -> PodView | None:
    return PodView(obs.pod) if obs.pod is not None else None


def start_due(obs: Observation) -> bool:
    """Whether agentctl is ready and ACP must be started (or started again) on the observed pod."""
    pod = _observed_pod(obs)
    agentctl = _agentctl_ready(obs, pod, _scheduled(obs, pod))
    return reasons.is_in(_agent_initialized(obs, pod, agentctl).reason, reasons.START_DUE)


def map_status(obs: Observation) -> AgentSessionStatus:
    pod = _observed_pod(obs)
    scheduled = _scheduled(obs, pod)
    agentctl = _agentctl_ready(obs, pod, scheduled)
    states: dict[ConditionType, _State] = {
        "PodScheduled": scheduled,
        "AgentctlReady": agentctl,
        "AgentInitialized": _agent_initialized(obs, pod, agentctl),
        "Suspended": (
            _State("True", reasons.SUSPENDED, "spec.suspend is true: no pod runs; the workspace is kept")
            if obs.suspend
            else _State("False", reasons.ACTIVE, "the session runs a pod")
        ),
    }
    states["Ready"] = _summary(obs, states)
    states[BUDGET_CONDITION] = budget_state(obs.previous.usage, obs.budget)
    conditions = _conditions(obs, states)
    ready = next(c for c in conditions if c.type == "Ready")
    pod_ip = pod.ip if pod else None
    return AgentSessionStatus(
        phase=_phase(obs, states["Ready"]),
        conditions=conditions,
        observedGeneration=obs.generation,
        podName=pod.name if pod else None,
        podUID=(pod.uid or None) if pod else None,
        podIP=pod_ip,
        agentctlEndpoint=f"http://{pod_ip}:{obs.agentctl_port}" if pod_ip else None,
        startTime=parse_time(pod.start_time) if pod else None,
        readyTime=ready.lastTransitionTime if ready.status == "True" else None,
        restartCount=pod.restart_count if pod else None,
        podsCreated=obs.previous.podsCreated,
        acp=obs.previous.acp,
        startup=_startup(pod, conditions, obs),
        # The egress proxy's to write; kept as it was read (the operator never writes it back).
        usage=obs.previous.usage,
    )
