"""What one reconcile does, decided once from what it observed. Pure: no I/O, time and randomness passed in.

The reconciler observes (the session, its pod, its token, the kubelet's probe reports, agentctl's activity, what
a pool offers) into one `Observed`, with the pod the spec asks for built once and whether an ACP start is due
already read from the status mapper; `decide` reads only that value, and the reconciler executes the actions of
the plan in their order. The plan is a value, so unit tests read the decision directly, and the order of the
calls, a status written before an ACP start included, is written down here instead of following from the shape
of the code that makes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from agentsession.api.egress import BUDGET_CONDITION, Budget, effective_budget, exhausted
from agentsession.api.manifest import Manifest
from agentsession.api.models import AgentSessionSpec, AgentSessionStatus, StartupTimings
from agentsession.api.session_ref import SessionRef
from agentsession.api.views import PodView, SessionView
from agentsession.contract.wire import StartRequest, StatusResponse
from agentsession.controller.config import OperatorConfig
from agentsession.controller.durations import parse_duration
from agentsession.controller.idle import seconds_until_idle
from agentsession.controller.namespaces import TTL_SECONDS as NAMESPACE_TTL_SECONDS
from agentsession.controller.pod_builder import (
    SPEC_HASH_ANNOTATION,
    AgentctlImageRefused,
    EgressProxyUnavailable,
    EgressRoute,
    SpecError,
    build_pod,
    build_token_secret,
    build_workspace_claim,
    drain_timeout,
)
from agentsession.controller.rejections import retry_after
from agentsession.controller.transitions import Event

# When agentctl cannot say how long the agent has been idle, it is asked again after at most this long.
IDLE_RETRY_SECONDS = 30.0
# While a restart waits for the running turn, how often agentctl is asked whether it has ended.
RESTART_RECHECK_SECONDS = 2.0
# agentctl runs, started, and is not ready, yet no kubelet report says why: the kubelet posts its Unhealthy Event
# apart from the pod's status, often after it, and the operator does not watch Events, so it looks again.
PROBE_RECHECK_SECONDS = 1.0
# While no pod can be made for want of the egress proxy's address, how often to look again (the Service's watch
# triggers a reconcile as soon as it appears; this is for a watch event lost on the way).
EGRESS_RECHECK_SECONDS = 30.0
# While the budget is spent, how often to look again: a raised namespace budget shows within the cache's TTL.
BUDGET_RECHECK_SECONDS = NAMESPACE_TTL_SECONDS


@dataclass(frozen=True)
class Observed:
    """Everything a reconcile looked at before deciding."""

    session: SessionView
    spec: AgentSessionSpec
    spec_error: str | None
    pod: Manifest | None
    token: str | None  # None while the token Secret does not exist
    now: datetime
    probe_message: str | None = None  # the kubelet's latest readiness failure of the running agentctl
    activity: StatusResponse | None = None  # agentctl's report, read for lifecycle.idleTimeout
    activity_error: str | None = None  # why that report could not be read
    agent_error: str | None = None  # agentctl's last error, read when the agent stopped being ready
    # What spec.poolRef's pool offers the session's first pod (`pool_claim`), read when it may claim one: a claim
    # of a warm pod that fits, or a cold start and why.
    pool_offer: ClaimPod | StartupTimings | None = None
    # A pod this session claimed whose claim was not recorded (the operator stopped in between): its pool and the
    # pod's stem.
    unrecorded_claim: tuple[str, str] | None = None
    # How a pod built now leaves through the egress proxy (its address, a new phantom); None without a proxy, or
    # while the proxy's address is unknown (then no pod is built, when the operator has one configured).
    egress: EgressRoute | None = None
    # The annotations of the session's namespace (its default budget among them).
    namespace_annotations: Mapping[str, str] = field(default_factory=dict)
    # The status mapper's word, on what was observed: agentctl is ready and ACP must be started (again).
    start_due: bool = False
    # The pod the spec asks for now (`desired_pod`), built once per reconcile, or why the pod builder refused it.
    desired: Manifest | SpecError = field(kw_only=True)

    @property
    def ref(self) -> SessionRef:
        """The session's identity, with the stem of its children's names (a claim not recorded yet included)."""
        ref = self.session.ref
        return replace(ref, stem=self.unrecorded_claim[1]) if self.unrecorded_claim else ref


# --- actions, executed in the order of the plan ---


@dataclass(frozen=True)
class CreateChild:
    """Create-or-read a Pod, claim or Secret; `on_created` is posted only when this call created it."""

    manifest: Manifest
    on_created: Event | None = None


@dataclass(frozen=True)
class DeletePod:
    name: str
    uid: str
    event: Event


@dataclass(frozen=True)
class Suspend:
    """Sets spec.suspend: the session stops for good, keeping its workspace, until someone resumes it."""

    event: Event


@dataclass(frozen=True)
class Drain:
    """Before the pod goes: agentctl lets a running turn finish up to the timeout, then cancels it.

    The agent container's wrapper asks agentctl for the same drain when the kubelet stops it; asking first is how
    the operator learns the outcome for its Event.
    """

    timeout_seconds: float


@dataclass(frozen=True)
class DeferRestart:
    """The pod's template changed while a turn runs: the pod is replaced once the turn has ended."""

    message: str


@dataclass(frozen=True)
class WriteStatus:
    """Maps and writes the status as executing the plan so far left it, before a step that takes long; the
    status of the whole plan is written after its last step, as always."""


@dataclass(frozen=True)
class StartAcp:
    request: StartRequest


@dataclass(frozen=True)
class PostEvent:
    event: Event


@dataclass(frozen=True)
class CancelTurn:
    """The budget is spent: the running turn is cancelled through agentctl (the proxy refuses its model calls
    anyway; cancelling ends it at once instead of at the agent's next failed call)."""

    reason: str


@dataclass(frozen=True)
class ClaimPod:
    """Takes one of the pool's warm pods, the first that another session does not take first: the pod moves to
    the session in one conditional write, then its token Secret and workspace claim follow."""

    pool: str
    candidates: tuple[tuple[Manifest, Manifest], ...]  # (a warm pod, the pod the session runs in its place)


@dataclass(frozen=True)
class AdoptChildren:
    """Finishes a claim the operator was stopped in the middle of: the pod is the session's, its children follow."""

    pool: str


Action = (
    CreateChild
    | Drain
    | DeletePod
    | DeferRestart
    | Suspend
    | WriteStatus
    | StartAcp
    | PostEvent
    | ClaimPod
    | AdoptChildren
    | CancelTurn
)


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    # A spec that the pod builder cannot turn into a pod; shown as InvalidSpec.
    spec_error: str | None = None
    # When to look at agentctl's activity again, if the session is Ready by the end of the reconcile.
    idle_recheck: float | None = None
    # How the session's first pod comes, when this reconcile decides it (status.startup).
    start: StartupTimings | None = None
    # Why no pod is made: the egress proxy's address is unknown; shown as EgressProxyUnavailable.
    egress_unavailable: str | None = None


def session_budget(observed: Observed, config: OperatorConfig) -> Budget:
    return effective_budget(observed.spec.budget, observed.namespace_annotations, config.default_budget)


def decide(observed: Observed, config: OperatorConfig, token: Callable[[], str]) -> Plan:
    """`token` gives the token the session's Secret must hold (derived from the release key)."""
    if observed.session.deleting:
        # Children go with their owner (garbage collection); nothing is created for a session on its way out.
        return Plan(())
    session, spec = observed.ref, observed.spec
    if observed.unrecorded_claim is not None:
        pool, member = observed.unrecorded_claim
        return Plan((AdoptChildren(pool),), start=claimed_start(pool, member))
    start = None
    # How the first pod comes is decided once the pod can be made: not while the egress proxy has no address.
    waits_for_egress = config.egress_proxy is not None and observed.egress is None
    if (
        observed.spec_error is None
        and not waits_for_egress
        and first_start(observed.session.status, observed.spec, observed.pod)
    ):
        taken = observed.pool_offer if observed.pool_offer is not None else StartupTimings(source="Cold")
        if isinstance(taken, ClaimPod):
            return Plan((taken,))
        start = taken
    actions: list[Action] = []
    if start is not None and start.reason is not None:
        actions.append(PostEvent(Event("Normal", start.reason, start.message or "")))
    if observed.token is None:
        actions.append(CreateChild(build_token_secret(session, token())))
    claim = build_workspace_claim(session, spec)
    if claim is not None:
        actions.append(CreateChild(claim))
    pod_actions = _pod_actions(observed) if observed.spec_error is None else []
    if isinstance(pod_actions, EgressProxyUnavailable):
        return Plan(tuple(actions), start=start, egress_unavailable=str(pod_actions))
    if isinstance(pod_actions, SpecError):
        return Plan((*actions, *_refused_pod(observed, pod_actions)), spec_error=str(pod_actions))
    actions.extend(pod_actions)
    idle_recheck: float | None = None
    # ACP starts, and idleness counts, only on a pod that this reconcile leaves in place.
    if not any(_touches_pod(a) for a in actions):
        actions.extend(_budget_actions(observed, config))
        actions.extend(_acp_actions(observed))
        idle, idle_recheck = _idle(observed)
        actions.extend(idle)
    return Plan(tuple(actions), idle_recheck=idle_recheck, start=start)


def first_start(status: AgentSessionStatus, spec: AgentSessionSpec, pod: Manifest | None) -> bool:
    """The session's first pod is due: how it comes (claimed or cold) is decided now, once."""
    startup = status.startup
    return (
        pod is None
        and not spec.suspend
        and not status.podsCreated
        and (startup is None or startup.source is None)
    )


def claimed_start(pool: str, member: str) -> StartupTimings:
    return StartupTimings(source="Claimed", pool=pool, member=member)


def _touches_pod(action: Action) -> bool:
    if isinstance(action, CreateChild):
        return action.manifest.get("kind") == "Pod"
    return isinstance(action, DeletePod | Suspend | ClaimPod | AdoptChildren)


def _pod_actions(observed: Observed) -> list[Action] | SpecError:
    """What the pod needs, or the pod builder's refusal where the pod it would build is needed."""
    session, spec, previous = observed.ref, observed.spec, observed.session.status
    raw = observed.pod
    pod = PodView(raw) if raw is not None else None
    if pod is not None and not pod.owned_by(session.uid):
        return [_delete(pod, "StalePodReplaced", "the pod belongs to an older session of this name")]
    if spec.suspend:
        if pod is not None and not pod.deleting:
            return [*_drain(observed), _delete(pod, "Suspending", "spec.suspend is true: stopping the pod")]
        return []
    desired = observed.desired
    if isinstance(desired, SpecError):
        return desired
    if pod is None:
        actions: list[Action] = []
        if previous.podUID:
            vanished = Event("Warning", "PodDeleted", f"pod {previous.podName} vanished; recreating it")
            actions.append(PostEvent(vanished))
        name = desired["metadata"]["name"]
        actions.append(CreateChild(desired, Event("Normal", "PodCreated", f"created pod {name}")))
        return actions
    if pod.deleting:
        return []
    restart_policy = spec.lifecycle.restartPolicy if spec.lifecycle else "Always"
    failed = pod.failed_reason
    if failed == "DeadlineExceeded":
        return [Suspend(Event("Normal", "MaxDurationReached", "lifecycle.maxDuration ran out; suspending"))]
    if failed is not None and restart_policy == "Always":
        return [_delete(pod, "ReplacingFailedPod", f"pod failed ({failed}); replacing it")]
    if _outdated(pod, desired):
        activity = observed.activity
        if activity is not None and (activity.acp.turn_running or activity.pending_permissions):
            return [
                DeferRestart(
                    "the session's pod template changed; the pod is replaced when the running turn ends "
                    "(delete the pod to replace it now)"
                )
            ]
        return [
            *_drain(observed),
            _delete(pod, "PodSpecChanged", "the session's pod template changed; replacing the pod"),
        ]
    return []


def _refused_pod(observed: Observed, error: SpecError) -> list[Action]:
    """A pod whose spec now names an agentctl image the operator does not allow (an older operator let it, or the
    spec changed) does not go on answering the operator and the gateway: it is deleted, with no drain, since what
    it would answer is not to be trusted."""
    pod = PodView(observed.pod) if observed.pod is not None else None
    if not isinstance(error, AgentctlImageRefused) or pod is None or pod.deleting:
        return []
    return [
        DeletePod(pod.name, pod.uid, Event("Warning", "AgentctlImageRefused", f"{error}; deleting the pod"))
    ]


def _outdated(pod: PodView, desired: Manifest) -> bool:
    """Whether the pod was built from another template than the one the spec asks for now."""
    return pod.annotation(SPEC_HASH_ANNOTATION) != PodView(desired).annotation(SPEC_HASH_ANNOTATION)


def _drain(observed: Observed) -> list[Action]:
    """A drain before the pod is deleted, where an agent may be in a turn: ACP started, and agentctl reachable."""
    status = observed.session.status
    if observed.token is None or not status.acp or not status.acp.sessionId:
        return []
    if not observed.session.condition_true("AgentctlReady"):
        return []
    return [Drain(drain_timeout(observed.spec))]


def _delete(pod: PodView, reason: str, message: str) -> DeletePod:
    return DeletePod(pod.name, pod.uid, Event("Normal", reason, message))


def _budget_actions(observed: Observed, config: OperatorConfig) -> list[Action]:
    """A cancel of the running turn when the budget turns spent (once: the condition records it), on a pod whose
    ACP session runs."""
    status = observed.session.status
    before = status.condition(BUDGET_CONDITION)
    if before is not None and before.status == "True":
        return []
    spent = exhausted(status.usage, session_budget(observed, config))
    if spent is None or observed.pod is None or observed.token is None:
        return []
    acp = status.acp
    if acp is None or not acp.sessionId or acp.podUID != PodView(observed.pod).uid:
        return []
    if not observed.session.condition_true("AgentctlReady"):
        return []
    return [CancelTurn(spent)]


def _acp_actions(observed: Observed) -> list[Action]:
    if observed.pod is None or observed.token is None or observed.spec.suspend:
        return []
    if not observed.start_due:
        return []
    old = observed.session.status.acp
    request = StartRequest(
        session_id=old.sessionId if old else None,
        # The initial prompt goes only with the very first start; a resume never repeats it.
        prompt=observed.spec.prompt if old is None or old.sessionId is None else None,
        # Without spec.cwd, agentctl uses its workdir: the workspace mount in the pod.
        cwd=observed.spec.cwd,
        mode_id=observed.spec.mode,
    )
    # AgentctlReady is written before ACP starts, which takes the agent's own start-up time.
    return [WriteStatus(), StartAcp(request)]


def _idle(observed: Observed) -> tuple[list[Action], float | None]:
    """lifecycle.idleTimeout: suspend an agent that has been idle that long, else say when to look again."""
    lifecycle = observed.spec.lifecycle
    if lifecycle is None or not lifecycle.idleTimeout or observed.spec.suspend:
        return [], None
    timeout = parse_duration(lifecycle.idleTimeout)
    if observed.activity_error is not None:
        return [], min(timeout, IDLE_RETRY_SECONDS)
    if observed.activity is None:
        # Not Ready when observed: no agent can have been idle longer than since it became ready.
        return [], timeout
    remaining = seconds_until_idle(timeout, observed.activity, observed.now)
    if remaining > 0:
        return [], max(remaining, 1.0)
    message = f"idle for lifecycle.idleTimeout ({timeout:.0f}s); suspending"
    return [Suspend(Event("Normal", "IdleTimeout", message))], None


def desired_pod(
    session: SessionRef, spec: AgentSessionSpec, config: OperatorConfig, egress: EgressRoute | None
) -> Manifest | SpecError:
    """The pod the spec asks for, or why the pod builder cannot make it (a refusal is the plan's to act on)."""
    try:
        return build_pod(session, spec, config, egress)
    except SpecError as error:
        return error


def wants_activity(
    session: SessionView, spec: AgentSessionSpec, pod: Manifest | None, desired: Manifest | SpecError
) -> bool:
    """Whether deciding needs agentctl's activity report: for the idle check of a Ready session with an idle
    timeout, or to know whether a turn runs on a pod whose template changed (`desired`: `desired_pod`)."""
    if pod is None or spec.suspend or session.deleting or session.status.podUID != PodView(pod).uid:
        return False
    lifecycle = spec.lifecycle
    if lifecycle is not None and lifecycle.idleTimeout and session.status.phase == "Ready":
        return True
    acp = session.status.acp
    if acp is None or not acp.sessionId:
        return False
    if isinstance(desired, SpecError):
        return False
    return _outdated(PodView(pod), desired)


def requeue_after(
    plan: Plan, refused: bool, previous: AgentSessionStatus, status: AgentSessionStatus, now: datetime,
    config: OperatorConfig, *, probe_unreported: bool = False,
) -> float | None:  # fmt: skip
    """Seconds until the session must be looked at again without any event; None to wait for one."""
    delays: list[float] = []
    if probe_unreported:
        delays.append(PROBE_RECHECK_SECONDS)
    ready = status.condition("Ready")
    if refused and ready is not None:
        before = previous.condition("Ready")
        # A refusal is retried after as long as it has lasted: soon at first, rarely later.
        since = before.lastTransitionTime if before and before.reason == ready.reason else None
        delays.append(retry_after(since, now))
    if status.acp is not None and status.acp.lastError and any(isinstance(a, StartAcp) for a in plan.actions):
        delays.append(config.start_retry_seconds)
    if plan.idle_recheck is not None and status.phase == "Ready":
        delays.append(plan.idle_recheck)
    if any(isinstance(a, DeferRestart) for a in plan.actions):
        delays.append(RESTART_RECHECK_SECONDS)
    if plan.egress_unavailable is not None:
        delays.append(EGRESS_RECHECK_SECONDS)
    spent = status.condition(BUDGET_CONDITION)
    if spent is not None and spent.status == "True":
        delays.append(BUDGET_RECHECK_SECONDS)
    return min(delays) if delays else None
