"""One idempotent reconcile of one AgentSession: converge its children, start ACP, write the whole status.

Every trigger (create, resume, update, pod event, requeue) runs this same function; it reads the current
state, never remembers what it did last time, and is safe to run twice.
"""

from __future__ import annotations

import base64
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from agentsession.agentctl_api import StartRequest
from agentsession.api.constants import MANAGER, TOKEN_KEY, pod_name, token_secret_name
from agentsession.api.models import AcpStatus, AgentSessionSpec, AgentSessionStatus, ConditionType, Phase
from agentsession.controller import metrics
from agentsession.controller.agentctl_client import AgentctlClient, AgentctlError
from agentsession.controller.config import OperatorConfig
from agentsession.controller.durations import parse_duration
from agentsession.controller.idle import seconds_until_idle
from agentsession.controller.kube import KubeApi, KubeError
from agentsession.controller.pod_builder import (
    SPEC_HASH_ANNOTATION,
    SpecError,
    build_pod,
    build_token_secret,
    build_workspace_claim,
)
from agentsession.controller.rejections import Rejection, rejection, retry_after
from agentsession.controller.session_ref import SessionRef
from agentsession.controller.status_mapper import (
    Observation,
    agentctl_restart_count,
    latest_readiness_failure,
    map_status,
    readiness_pending_since,
)
from agentsession.controller.transitions import condition_events

Manifest = dict[str, Any]
PodLookup = Callable[[str, str], Manifest | None]
log = logging.getLogger(__name__)

IDLE_RETRY_SECONDS = 30.0
# AgentInitialized reasons that mean "agentctl is ready and the start call is due".
START_DUE = frozenset({"Initializing", "AgentctlRestarted", "InitializeFailed", "AgentExited"})
STAGES: tuple[tuple[ConditionType, str], ...] = (
    ("PodScheduled", "scheduled"),
    ("AgentctlReady", "agentctl_ready"),
    ("AgentInitialized", "acp_initialized"),
)


def utc_now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


class Reconciler:
    def __init__(
        self,
        config: OperatorConfig,
        kube: KubeApi,
        agentctl: AgentctlClient,
        pod_lookup: PodLookup,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._config = config
        self._kube = kube
        self._agentctl = agentctl
        self._pod_lookup = pod_lookup
        self._clock = clock
        self._phases: dict[tuple[str, str], Phase] = {}

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
        body = await self._kube.get_session(namespace, name)
        if body is None:
            self._set_phase((namespace, name), None)
            return None
        session = SessionRef.from_body(body)
        previous = _previous_status(body)
        deleting = bool(body["metadata"].get("deletionTimestamp"))
        spec_error: str | None = None
        try:
            spec = AgentSessionSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            spec, spec_error = AgentSessionSpec(), _spec_problem(error)

        pod = self._pod_lookup(namespace, pod_name(session.name))
        token: str | None = None
        pods_created = previous.podsCreated or 0
        refused: Rejection | None = None
        if not deleting:
            try:
                token = await self._ensure_token(session)
                claim = build_workspace_claim(session, spec)
                if claim is not None:
                    await self._kube.create(claim)
                if spec_error is None:
                    pod, created = await self._converge_pod(session, spec, previous, pod)
                    pods_created += int(created)
            except SpecError as error:
                spec_error = str(error)
            except KubeError as error:
                refused = rejection(error.kind, error.status, error.api_message)
                if refused is None:
                    raise
                log.warning("the API server refused a child of %s/%s: %s", namespace, name, error)

        observation = Observation(
            generation=session.generation,
            suspend=spec.suspend,
            previous=previous.model_copy(update={"podsCreated": pods_created or None}),
            now=self._clock(),
            pod=pod,
            deleting=deleting,
            agentctl_port=self._config.agentctl_port,
            spec_error=spec_error,
            rejection=refused,
        )
        status = map_status(observation)
        requeue: float | None = None
        if refused is not None:
            before = previous.condition("Ready")
            refused_since = before.lastTransitionTime if before and before.reason == refused.reason else None
            requeue = retry_after(refused_since, observation.now)
        since = readiness_pending_since(pod) if pod is not None else None
        if pod is not None and since is not None:
            # Only the kubelet's Unhealthy events tell a failing readiness probe (and why) from one not run yet.
            events = await self._kube.warning_events(namespace, pod["metadata"]["uid"], "Unhealthy")
            message = latest_readiness_failure(events, since)
            if message:
                observation = replace(observation, probe_message=message)
                status = map_status(observation)
        initialized = status.condition("AgentInitialized")
        if (
            pod is not None
            and token is not None
            and initialized is not None
            and initialized.reason in START_DUE
        ):
            acp = await self._start_acp(spec, observation.previous, pod, token)
            observation = replace(observation, previous=observation.previous.model_copy(update={"acp": acp}))
            status = map_status(observation)
            if acp.lastError:
                requeue = self._config.start_retry_seconds

        await self._write(body, session, previous, status)
        idle_timeout = spec.lifecycle.idleTimeout if spec.lifecycle else None
        if pod is not None and token is not None and status.phase == "Ready" and idle_timeout:
            idle_check = await self._check_idle(session, pod, token, parse_duration(idle_timeout))
            if idle_check is not None:
                requeue = idle_check if requeue is None else min(requeue, idle_check)
        return requeue

    async def _ensure_token(self, session: SessionRef) -> str:
        existing = await self._kube.get_secret(session.namespace, token_secret_name(session.name))
        if existing is None:
            existing, _ = await self._kube.create(build_token_secret(session, secrets.token_urlsafe(32)))
        return base64.b64decode(existing.get("data", {}).get(TOKEN_KEY, "")).decode()

    async def _converge_pod(
        self, session: SessionRef, spec: AgentSessionSpec, previous: AgentSessionStatus, pod: Manifest | None
    ) -> tuple[Manifest | None, bool]:
        """Creates, keeps or deletes the pod; returns the pod to observe and whether one was created."""
        if pod is not None and not _owned_by(pod, session):
            await self._delete(
                session, pod, "StalePodReplaced", "the pod belongs to an older session of this name"
            )
            return pod, False
        if spec.suspend:
            if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                await self._delete(session, pod, "Suspending", "spec.suspend is true: stopping the pod")
            return pod, False
        desired = build_pod(session, spec, self._config)
        if pod is None:
            if previous.podUID:
                await self._event(
                    session, "Warning", "PodDeleted", f"pod {previous.podName} vanished; recreating it"
                )
            pod, created = await self._kube.create(desired)
            if created:
                await self._event(session, "Normal", "PodCreated", f"created pod {pod['metadata']['name']}")
            return pod, created
        if pod["metadata"].get("deletionTimestamp"):
            return pod, False
        restart_policy = spec.lifecycle.restartPolicy if spec.lifecycle else "Always"
        failed_reason = (
            pod["status"].get("reason") or "Failed"
            if pod.get("status", {}).get("phase") == "Failed"
            else None
        )
        if failed_reason == "DeadlineExceeded":
            # lifecycle.maxDuration ran out: the session stops for good, keeping its workspace, until resumed.
            await self._kube.patch_session_spec(session.namespace, session.name, {"suspend": True})
            await self._event(
                session, "Normal", "MaxDurationReached", "lifecycle.maxDuration ran out; suspending"
            )
        elif failed_reason is not None and restart_policy == "Always":
            await self._delete(
                session, pod, "ReplacingFailedPod", f"pod failed ({failed_reason}); replacing it"
            )
        elif _spec_hash(pod) != _spec_hash(desired):
            await self._delete(
                session, pod, "PodSpecChanged", "the session's pod template changed; replacing the pod"
            )
        return pod, False

    async def _check_idle(
        self, session: SessionRef, pod: Manifest, token: str, idle_timeout: float
    ) -> float | None:
        """Suspends the session once agentctl reports it idle for `idle_timeout`; else when to look again."""
        try:
            report = await self._agentctl.status(self._endpoint(pod), token)
        except AgentctlError as error:
            log.warning("idle check of %s/%s failed: %s", session.namespace, session.name, error)
            return min(idle_timeout, IDLE_RETRY_SECONDS)
        remaining = seconds_until_idle(idle_timeout, report, self._clock())
        if remaining > 0:
            return max(remaining, 1.0)
        await self._kube.patch_session_spec(session.namespace, session.name, {"suspend": True})
        await self._event(
            session,
            "Normal",
            "IdleTimeout",
            f"idle for lifecycle.idleTimeout ({idle_timeout:.0f}s); suspending",
        )
        return None

    def _endpoint(self, pod: Manifest) -> str:
        host = self._config.agentctl_host_override or pod.get("status", {}).get("podIP")
        return f"http://{host}:{self._config.agentctl_port}"

    async def _delete(self, session: SessionRef, pod: Manifest, reason: str, message: str) -> None:
        await self._kube.delete_pod(session.namespace, pod["metadata"]["name"], pod["metadata"]["uid"])
        await self._event(session, "Normal", reason, message)

    async def _start_acp(
        self, spec: AgentSessionSpec, previous: AgentSessionStatus, pod: Manifest, token: str
    ) -> AcpStatus:
        """Calls agentctl's start; the result (or the error) is recorded for this pod and agentctl restart."""
        old = previous.acp or AcpStatus()
        endpoint = self._endpoint(pod)
        request = StartRequest(
            session_id=old.sessionId,
            # The initial prompt goes only with the very first start; a resume never repeats it.
            prompt=spec.prompt if old.sessionId is None else None,
            # Without spec.cwd, agentctl uses its workdir: the workspace mount in the pod.
            cwd=spec.cwd,
            mode_id=spec.mode,
        )
        recorded = {"podUID": pod["metadata"]["uid"], "agentctlRestartCount": agentctl_restart_count(pod)}
        try:
            response = await self._agentctl.start(endpoint, token, request)
        except AgentctlError as error:
            log.warning("ACP start for pod %s failed: %s", pod["metadata"]["name"], error)
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

    async def _write(
        self, body: Manifest, session: SessionRef, previous: AgentSessionStatus, status: AgentSessionStatus
    ) -> None:
        new = status.model_dump(mode="json")
        if new != previous.model_dump(mode="json"):
            await self._kube.patch_session_status(session.namespace, session.name, new)
        for record in condition_events(previous, status):
            await self._event(session, record.type, record.reason, record.message)
        self._observe_stages(previous, status)
        self._set_phase(session.key, status.phase)

    async def _event(self, session: SessionRef, event_type: str, reason: str, message: str) -> None:
        metrics.EVENTS_POSTED.labels(type=event_type).inc()
        await self._kube.post_event(session.object_reference(), event_type, reason, message, MANAGER)

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


def _previous_status(body: Manifest) -> AgentSessionStatus:
    try:
        return AgentSessionStatus.model_validate(body.get("status") or {})
    except ValidationError:
        # A status we cannot read is rebuilt from scratch: the operator is its only writer.
        log.warning("ignoring unreadable status of %s", body["metadata"].get("name"))
        return AgentSessionStatus()


def _owned_by(pod: Manifest, session: SessionRef) -> bool:
    return any(ref.get("uid") == session.uid for ref in pod["metadata"].get("ownerReferences") or [])


def _spec_hash(pod: Manifest) -> str | None:
    annotations = pod["metadata"].get("annotations") or {}
    value = annotations.get(SPEC_HASH_ANNOTATION)
    return str(value) if value is not None else None
