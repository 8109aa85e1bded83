"""One idempotent reconcile of one AgentSession: observe → decide (pure, once) → act → report the status.

Observe reads into one `Observed`, with the desired pod built once and the status mapper's word on whether ACP
start is due; `decisions.decide` turns it into a plan; act carries the plan out; the status is mapped and written
once at the end, and once more only where the plan says so (`WriteStatus`, before an ACP start). Every trigger
(create, resume, update, pod event, requeue) runs this same function; it reads the current state, never
remembers what it did last time, and is safe to run twice. Warm pools are `pool_claim`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from agentsession.agentctl_client import AgentctlConnector, AgentctlError
from agentsession.api.constants import AGENTCTL_CONTAINER, LABEL_SESSION, MANAGER, token_secret_name
from agentsession.api.egress import new_phantom
from agentsession.api.manifest import Manifest
from agentsession.api.models import (
    AcpStatus,
    AgentSessionSpec,
    AgentSessionStatus,
    ConditionType,
    Phase,
    StartupTimings,
)
from agentsession.api.session_ref import SessionRef
from agentsession.api.views import ChildView, EventView, PodView, SessionView
from agentsession.contract.wire import StatusResponse
from agentsession.controller import metrics
from agentsession.controller.config import OperatorConfig
from agentsession.controller.decisions import (
    AdoptChildren,
    CancelTurn,
    ClaimPod,
    CreateChild,
    DeferRestart,
    DeletePod,
    Drain,
    Observed,
    Plan,
    PostEvent,
    StartAcp,
    Suspend,
    WriteStatus,
    decide,
    desired_pod,
    first_start,
    requeue_after,
    session_budget,
    wants_activity,
)
from agentsession.controller.namespaces import NamespaceAnnotations
from agentsession.controller.network_policy import policy_keeper
from agentsession.controller.pod_builder import egress_route
from agentsession.controller.pool_claim import PodLookup, PoolClaims, session_pod
from agentsession.controller.rejections import Rejection, rejection
from agentsession.controller.status_mapper import (
    Observation,
    agent_restart_count,
    agent_unready_since,
    agentctl_restart_count,
    latest_readiness_failure,
    map_status,
    readiness_pending_since,
    start_due,
)
from agentsession.controller.transitions import Event, drain_event, status_events
from agentsession.kube.client import Kube
from agentsession.kube.errors import Conflict, KubeError, NotFound
from agentsession.kube.ops import create_or_read, decode_token, post_event
from agentsession.kube.resources import AGENT_SESSIONS, EVENTS, PODS, SECRETS, resource_of

# The agentctl token of the children named after a stem in a namespace (`contract.auth.TokenDeriver`).
TokenOf = Callable[[str, str], str]
log = logging.getLogger(__name__)
CLAIM_RETRY_SECONDS = 0.2

STAGES: tuple[tuple[ConditionType, str], ...] = (
    ("PodScheduled", "scheduled"),
    ("AgentctlReady", "agentctl_ready"),
    ("AgentInitialized", "acp_initialized"),
)


def utc_now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@dataclass
class Outcome:
    """What executing the plan changed so far, for the status written after it (and at a `WriteStatus`)."""

    written: AgentSessionStatus  # the status as the API server holds it
    pod: Manifest | None
    pods_created: int
    acp: AcpStatus | None = None
    rejection: Rejection | None = None
    restart_pending: str | None = None
    start: StartupTimings | None = None


class Reconciler:
    def __init__(
        self,
        config: OperatorConfig,
        kube: Kube,
        agentctl: AgentctlConnector,
        pod_lookup: PodLookup,
        token_of: TokenOf,
        clock: Callable[[], datetime] = utc_now,
        proxy_address: Callable[[], str | None] = lambda: None,
        namespaces: NamespaceAnnotations | None = None,
    ) -> None:
        self._config = config
        self._kube = kube
        self._agentctl = agentctl
        self._pod_lookup = pod_lookup
        self._token_of = token_of
        self._clock = clock
        # The egress proxy's ClusterIP as the Service's watch last saw it (`egress_address.ProxyAddress`).
        self._proxy_address = proxy_address
        self._namespaces = namespaces or NamespaceAnnotations(kube)
        self._policies = policy_keeper(config, kube)
        self._claims = PoolClaims(config, kube, pod_lookup, self._event)
        self._phases: dict[tuple[str, str], Phase] = {}
        # A session's token never changes while the session lives: its Secret is read once per session uid, to
        # know that it holds the token, not per reconcile.
        self._tokens: dict[tuple[str, str], tuple[str, str]] = {}

    async def reconcile(self, namespace: str, name: str) -> float | None:
        """Returns seconds after which to reconcile again, or None to wait for the next event."""
        started = time.monotonic()
        try:
            return await self._reconcile(namespace, name)
        except Exception as error:
            metrics.RECONCILE_ERRORS.labels(kind=type(error).__name__).inc()
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    async def _reconcile(self, namespace: str, name: str) -> float | None:
        observed = await self._observe(namespace, name)
        if observed is None:
            self._set_phase((namespace, name), None)
            self._tokens.pop((namespace, name), None)
            return None
        ref = observed.ref
        plan = decide(observed, self._config, lambda: self._token_of(ref.namespace, ref.children))
        if plan.start is not None and plan.start.pool and plan.start.reason:
            metrics.POOL_MISSES.labels(pool=plan.start.pool, reason=plan.start.reason).inc()
        outcome = await self._act(observed, plan)
        status = await self._report(observed, plan, outcome)
        if any(isinstance(a, ClaimPod | AdoptChildren) for a in plan.actions) and outcome.start is None:
            # A claim that took no pod: every candidate was taken first (once the watch shows that, the next
            # reconcile decides again), or it finished one cut short, which changes no pod, so no pod event
            # brings the reconcile that starts ACP on it.
            return CLAIM_RETRY_SECONDS
        probe_unreported = (
            observed.probe_message is None
            and outcome.pod is not None
            and readiness_pending_since(outcome.pod) is not None
        )
        return requeue_after(
            plan,
            outcome.rejection is not None,
            observed.session.status,
            status,
            observed.now,
            self._config,
            probe_unreported=probe_unreported,
        )

    def _status(self, observed: Observed, plan: Plan, outcome: Outcome) -> AgentSessionStatus:
        previous = observed.session.status
        acp = outcome.acp if outcome.acp is not None else previous.acp
        return map_status(
            observation(
                observed,
                self._config,
                pod=outcome.pod,
                previous=previous.model_copy(
                    update={"podsCreated": outcome.pods_created or None, "acp": acp}
                ),
                spec_error=observed.spec_error or plan.spec_error,
                egress_unavailable=plan.egress_unavailable,
                rejection=outcome.rejection,
                restart_pending=outcome.restart_pending,
                start=outcome.start or plan.start,
            )
        )

    # --- observe ---

    async def _observe(self, namespace: str, name: str) -> Observed | None:
        try:
            session = SessionView(await self._kube.get(AGENT_SESSIONS, namespace, name))
        except NotFound:
            return None
        spec_error: str | None = None
        try:
            spec = AgentSessionSpec.model_validate(session.spec)
        except ValidationError as error:
            spec, spec_error = AgentSessionSpec(), _spec_problem(error)
        pod, unrecorded = session_pod(session, self._pod_lookup(namespace, LABEL_SESSION, name))
        ref = replace(session.ref, stem=unrecorded[1]) if unrecorded else session.ref
        token = None if session.deleting else await self._token(session, ref.children)
        # A phantom for the pod this reconcile may create; unused (and forgotten) when it creates none.
        route = egress_route(self._config, self._proxy_address(), new_phantom())
        # Budgets count only what the egress proxy metered: without one, and with no usage, nothing to read.
        metered = self._config.egress_proxy is not None or session.status.usage is not None
        annotations = await self._namespaces.get(namespace) if metered and not session.deleting else {}
        now = self._clock()
        offer = self._claims.offer(ref, spec, route) if first_start(session.status, spec, pod) else None
        desired = desired_pod(ref, spec, self._config, route)
        probe_message = await self._probe_failure(namespace, pod) if pod is not None else None
        agent_error, activity, activity_error = None, None, None
        # Only an agentctl that answers its probe is asked anything: a frozen one would hold this reconcile, and
        # with it the status, until the call timed out (the agent's probe goes through agentctl, so it fails too).
        agentctl = PodView(pod).init_container(AGENTCTL_CONTAINER) if pod is not None else None
        if pod is not None and token is not None and agentctl is not None and agentctl.ready:
            agent_error = await self._agent_error(session, pod, token)
            if wants_activity(session, spec, pod, desired):
                activity, activity_error = await self._activity(session, pod, token)
        observed = Observed(
            session,
            spec,
            spec_error,
            pod,
            token,
            now,
            probe_message=probe_message,
            activity=activity,
            activity_error=activity_error,
            agent_error=agent_error,
            pool_offer=offer,
            unrecorded_claim=unrecorded,
            egress=route,
            namespace_annotations=annotations,
            desired=desired,
        )
        # Decide reads the mapper's word on the start, not the mapper.
        return replace(observed, start_due=start_due(observation(observed, self._config)))

    async def _probe_failure(self, namespace: str, pod: Manifest) -> str | None:
        """The kubelet's latest readiness failure of the running agentctl, if it is not ready yet."""
        since = readiness_pending_since(pod)
        if since is None:
            return None
        # Only the kubelet's Unhealthy events tell a failing readiness probe (and why) from one not run yet.
        # agentctl's own probe only: the agent container's says the agent has not answered yet.
        selector = (
            f"involvedObject.uid={PodView(pod).uid},reason=Unhealthy,type=Warning,"
            f"involvedObject.fieldPath=spec.initContainers{{{AGENTCTL_CONTAINER}}}"
        )
        events = (await self._kube.list(EVENTS, namespace, field_selector=selector)).items
        return latest_readiness_failure(map(EventView, events), since)

    async def _agent_error(self, session: SessionView, pod: Manifest, token: str) -> str | None:
        """agentctl's last error, when the agent runs yet agentctl cannot talk to it: it says why."""
        if agent_unready_since(pod, session.status.acp) is None:
            return None
        try:
            return (await self._agentctl(self._endpoint(pod), token).status()).last_error
        except AgentctlError as error:
            self._refused_token(session, error)
            log.warning("status of agentctl of %s/%s failed: %s", *session.key, error)
            return None

    async def _activity(
        self, session: SessionView, pod: Manifest, token: str
    ) -> tuple[StatusResponse | None, str | None]:
        """agentctl's activity report, or why it could not be read."""
        try:
            return await self._agentctl(self._endpoint(pod), token).status(), None
        except AgentctlError as error:
            self._refused_token(session, error)
            log.warning("idle check of %s/%s failed: %s", *session.key, error)
            return None, str(error)

    async def _token(self, session: SessionView, stem: str) -> str | None:
        cached = self._tokens.get(session.key)
        if cached is not None and cached[0] == session.uid:
            return cached[1]
        if session.status.observedGeneration is None:
            # Never reported on, so never given a Secret, unless a reconcile died before its first status write:
            # creating the Secret then reads the existing one instead. Saves a read before a new session's pod.
            return None
        try:
            secret = await self._kube.get(SECRETS, session.namespace, token_secret_name(stem))
        except NotFound:
            return None
        if ChildView(secret).held_by_another_session(session.uid):
            # An older session's, on its way out: this session gets its own (`_create_child`).
            return None
        token = decode_token(secret)
        if token != self._token_of(session.namespace, stem):
            # Written before the release key (or by hand): the plan writes the derived one (`_create_child`).
            return None
        self._tokens[session.key] = (session.uid, token)
        return token

    def _refused_token(self, session: SessionView, error: AgentctlError) -> None:
        """agentctl refusing the token means the Secret was changed: read it again next time."""
        if error.status == 401:
            self._tokens.pop(session.key, None)

    # --- act ---

    async def _act(self, observed: Observed, plan: Plan) -> Outcome:
        session, ref = observed.session, observed.ref
        outcome = Outcome(session.status, observed.pod, session.status.podsCreated or 0)
        for action in plan.actions:
            match action:
                case CreateChild():
                    try:
                        if action.manifest["kind"] == "Pod" and self._policies is not None:
                            await self._policies.ensure(session.namespace)
                        obj, created = await self._create_child(session, action.manifest)
                    except KubeError as error:
                        outcome.rejection = rejection(error.kind, error.status, error.api_message)
                        if outcome.rejection is None:
                            raise
                        log.warning("the API server refused a child of %s/%s: %s", *session.key, error)
                        break  # what follows needs this child
                    if obj["kind"] == "Pod":
                        outcome.pod = obj
                        outcome.pods_created += int(created)
                    elif obj["kind"] == "Secret":
                        self._tokens[session.key] = (session.uid, decode_token(obj))
                    if created and action.on_created is not None:
                        await self._event(ref, action.on_created)
                case Drain():
                    await self._drain(observed, action)
                case DeletePod():
                    # Gone already, or the name now holds a newer pod: either way not ours to delete.
                    with contextlib.suppress(NotFound, Conflict):
                        await self._kube.delete(PODS, session.namespace, action.name, uid=action.uid)
                    await self._event(ref, action.event)
                case Suspend():
                    await self._kube.patch(
                        AGENT_SESSIONS, session.namespace, session.name, {"spec": {"suspend": True}}
                    )
                    await self._event(ref, action.event)
                case WriteStatus():
                    await self._report(observed, plan, outcome)
                case StartAcp():
                    outcome.acp = await self._start_acp(observed, action)
                case DeferRestart():
                    outcome.restart_pending = action.message
                case PostEvent():
                    await self._event(ref, action.event)
                case ClaimPod() | AdoptChildren():
                    taken = await self._claims.take(ref, action)
                    if taken is not None:
                        outcome.pod, outcome.start = taken.pod, taken.start
                case CancelTurn():
                    await self._cancel(observed, action)
        return outcome

    async def _create_child(self, session: SessionView, manifest: Manifest) -> tuple[Manifest, bool]:
        """Creates the child, or reads the one of its name; one that an older session of the same name left
        (deleted and created again before the garbage collector caught up) is deleted and made anew, since the
        collector would delete it under this session and nothing would bring it back."""
        obj, created = await create_or_read(self._kube, manifest)
        stale = ChildView(obj)
        if created or not stale.held_by_another_session(session.uid):
            return await self._same_token(obj, manifest), created
        log.info("%s %s/%s belongs to an older session of this name; replacing it", obj["kind"], *stale.key)
        with contextlib.suppress(NotFound, Conflict):
            await self._kube.delete(resource_of(obj), stale.namespace, stale.name, uid=stale.uid)
        obj, created = await create_or_read(self._kube, manifest)
        if not created and ChildView(obj).held_by_another_session(session.uid):
            # Still held by a finalizer (a claim is kept while a pod of the older session mounts it).
            raise KubeError(f"{obj['kind']} {stale.namespace}/{stale.name} of an older session of this name "
                            "is still being deleted; will retry", kind=obj["kind"])  # fmt: skip
        return obj, created

    async def _same_token(self, obj: Manifest, manifest: Manifest) -> Manifest:
        """A token Secret of this session that holds another token than the derived one gets the derived one (the
        pod's agentctl reads it when it starts next; until then it refuses the signatures)."""
        if obj["kind"] != "Secret" or decode_token(obj) == decode_token(manifest):
            return obj
        log.info(
            "token Secret %s/%s holds another token than the release key gives; rewriting it",
            *ChildView(obj).key,
        )
        return await self._kube.patch(SECRETS, *ChildView(obj).key, {"data": manifest["data"]})

    async def _start_acp(self, observed: Observed, action: StartAcp) -> AcpStatus:
        """Calls agentctl's start; the result (or the error) is recorded for this pod and agentctl restart."""
        pod, token = observed.pod, observed.token
        # decide() starts ACP only on an observed pod whose token it read.
        assert pod is not None
        assert token is not None
        old = observed.session.status.acp or AcpStatus()
        recorded = {
            "podUID": PodView(pod).uid,
            "agentctlRestartCount": agentctl_restart_count(pod),
            "agentRestartCount": agent_restart_count(pod),
        }
        try:
            response = await self._agentctl(self._endpoint(pod), token).start(action.request)
        except AgentctlError as error:
            self._refused_token(observed.session, error)
            log.warning("ACP start for pod %s failed: %s", PodView(pod).name, error)
            return old.model_copy(update={**recorded, "lastError": str(error)[:4000]})
        return AcpStatus(
            sessionId=response.session_id,
            currentModeId=response.current_mode_id,
            availableModes=response.available_modes or None,
            agentInfo=response.agent_info,
            initializedTime=self._clock(),
            lastError=None,
            **recorded,
        )

    async def _drain(self, observed: Observed, action: Drain) -> None:
        """Asks agentctl to drain and tells the outcome; a failure only loses the Event, as the agent container
        asks agentctl for the same drain when it is stopped."""
        pod, token, session = observed.pod, observed.token, observed.session
        assert pod is not None
        assert token is not None
        try:
            result = await self._agentctl(self._endpoint(pod), token).drain(action.timeout_seconds)
        except AgentctlError as error:
            self._refused_token(session, error)
            log.warning("drain of %s/%s before stopping its pod failed: %s", *session.key, error)
            return
        event = drain_event(result)
        if event is not None:
            await self._event(session.ref, event)

    async def _cancel(self, observed: Observed, action: CancelTurn) -> None:
        """Ends the running turn of a session whose budget is spent. A failure is logged only: the proxy refuses
        the turn's next model call anyway, and the agent ends it then."""
        pod, token, session = observed.pod, observed.token, observed.session
        assert pod is not None
        assert token is not None
        try:
            result = await self._agentctl(self._endpoint(pod), token).cancel()
        except AgentctlError as error:
            self._refused_token(session, error)
            log.warning("cancelling the turn of %s/%s (budget spent: %s) failed: %s", *session.key,
                        action.reason, error)  # fmt: skip
            return
        log.info("budget of %s/%s spent (%s); cancelled the running turn (still running: %s)", *session.key,
                 action.reason, result.turn_running)  # fmt: skip

    def _endpoint(self, pod: Manifest) -> str:
        host = self._config.agentctl_host_override or PodView(pod).ip
        return f"http://{host}:{self._config.agentctl_port}"

    # --- report ---

    async def _report(self, observed: Observed, plan: Plan, outcome: Outcome) -> AgentSessionStatus:
        """Maps the status from what was observed and what executing the plan changed so far, and writes it."""
        status = self._status(observed, plan, outcome)
        await self._write(observed.session, outcome.written, status)
        outcome.written = status
        return status

    async def _write(
        self, session: SessionView, previous: AgentSessionStatus, status: AgentSessionStatus
    ) -> None:
        """Writes `status` if it differs from `previous` (what the API holds), with the Events of the change."""
        # The Events go out with the status, not after it: a reconcile waits one round trip, not one per Event.
        writes = [self._event(session.ref, event) for event in status_events(previous, status)]
        # status.usage is the egress proxy's: written back, a value read before would undo its newer counts.
        new = status.model_dump(mode="json", exclude={"usage"})
        if new != previous.model_dump(mode="json", exclude={"usage"}):
            writes.insert(0, self._patch_status(session, new))
        await asyncio.gather(*writes)
        self._observe_stages(previous, status)
        self._set_phase(session.key, status.phase)

    async def _patch_status(self, session: SessionView, status: Manifest) -> None:
        try:
            await self._kube.patch(
                AGENT_SESSIONS, session.namespace, session.name, {"status": status}, status=True
            )
        except NotFound:
            # Deleted since it was observed: its DELETED event comes next and forgets it.
            log.debug("%s/%s is gone; its status is not written", *session.key)

    async def _event(self, session: SessionRef, event: Event) -> None:
        metrics.EVENTS_POSTED.labels(type=event.type).inc()
        involved = session.object_reference()
        await post_event(self._kube, involved, event.type, event.reason, event.message, MANAGER)

    def _observe_stages(self, previous: AgentSessionStatus, status: AgentSessionStatus) -> None:
        timings = status.startup
        if timings is None:
            return
        values = {
            "scheduled": timings.scheduledSeconds,
            "agentctl_ready": timings.agentctlReadySeconds,
            "acp_initialized": timings.initializedSeconds,
        }
        for kind, stage in STAGES:
            before, after = previous.condition(kind), status.condition(kind)
            turned_true = (
                after is not None and after.status == "True" and (before is None or before.status != "True")
            )
            value = values[stage]
            if turned_true and value is not None:
                metrics.STARTUP_STAGE_SECONDS.labels(stage=stage).observe(value)

    def _set_phase(self, key: tuple[str, str], phase: Phase | None) -> None:
        before = self._phases.pop(key, None)
        if phase is not None:
            self._phases[key] = phase
        if before == phase:
            return
        # Only a change of phase moves the gauges; most reconciles leave it as it was.
        if before is not None:
            metrics.SESSIONS.labels(phase=before).dec()
        if phase is not None:
            metrics.SESSIONS.labels(phase=phase).inc()


def _spec_problem(error: ValidationError) -> str:
    """The first thing wrong with a spec, named by its field, instead of pydantic's whole report."""
    first = error.errors()[0]
    where = ".".join(["spec", *(str(part) for part in first["loc"])])
    more = error.error_count() - 1
    return f"{where}: {first['msg']}" + (f" (and {more} more)" if more else "")


def observation(observed: Observed, config: OperatorConfig, **changes: Any) -> Observation:
    """The status mapper's view of what was observed, with what executing the plan changed."""
    values: dict[str, Any] = {
        "generation": observed.session.generation,
        "suspend": observed.spec.suspend,
        "previous": observed.session.status,
        "now": observed.now,
        "pod": observed.pod,
        "deleting": observed.session.deleting,
        "agentctl_port": config.agentctl_port,
        "spec_error": observed.spec_error,
        "probe_message": observed.probe_message,
        "agent_error": observed.agent_error,
        "budget": session_budget(observed, config),
    }
    values.update(changes)
    return Observation(**values)
