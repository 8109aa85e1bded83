"""Typed, read-only views over the raw objects the API returns, for the fields code reads.

The bodies stay plain JSON (the pure core and the wire see them unchanged); a view answers the questions
callers ask (is it being deleted? who owns it? which conditions are true? how did a container end?) in one place,
instead of `.get("status") or {}` chains spread over every caller. The operator, the gateway and the egress proxy
read sessions and pods through these.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from agentsession.api import reasons
from agentsession.api.constants import KIND
from agentsession.api.manifest import Key, Manifest
from agentsession.api.models import AgentSessionStatus, Condition, ConditionType
from agentsession.api.session_ref import SessionRef

log = logging.getLogger(__name__)


def _text(fields: Manifest, key: str) -> str:
    """A field as text; "" when it is missing or empty."""
    return str(fields.get(key) or "")


def _optional_text(fields: Manifest, key: str) -> str | None:
    """A field as text; None when it is missing or empty."""
    value = fields.get(key)
    return str(value) if value else None


class _Meta:
    def __init__(self, body: Manifest) -> None:
        self.body = body
        self.meta: Manifest = body.get("metadata") or {}

    @property
    def namespace(self) -> str:
        return _text(self.meta, "namespace")

    @property
    def name(self) -> str:
        return _text(self.meta, "name")

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def uid(self) -> str:
        return _text(self.meta, "uid")

    @property
    def resource_version(self) -> str:
        return _text(self.meta, "resourceVersion")

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def created_at(self) -> str | None:
        return _optional_text(self.meta, "creationTimestamp")

    def annotation(self, key: str) -> str | None:
        value = (self.meta.get("annotations") or {}).get(key)
        return str(value) if value is not None else None

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.meta.get("labels") or {})


class SessionView(_Meta):
    """An AgentSession as its readers see it: identity, the raw spec, and the status as the typed model."""

    @property
    def generation(self) -> int:
        return int(self.meta.get("generation") or 0)

    @property
    def ref(self) -> SessionRef:
        startup = self.status.startup
        stem = startup.member if startup is not None and startup.member else ""
        return SessionRef(self.namespace, self.name, self.uid, self.generation, stem)

    @property
    def spec(self) -> Manifest:
        spec: Manifest = self.body.get("spec") or {}
        return spec

    @property
    def suspended(self) -> bool:
        return bool(self.spec.get("suspend"))

    @cached_property
    def status(self) -> AgentSessionStatus:
        try:
            return AgentSessionStatus.model_validate(self.body.get("status") or {})
        except ValidationError:
            # A status nobody can read is rebuilt from scratch: the operator is its only writer.
            log.warning("ignoring the unreadable status of %s/%s", self.namespace, self.name)
            return AgentSessionStatus()

    def condition(self, kind: ConditionType) -> Condition | None:
        return self.status.condition(kind)

    def condition_true(self, kind: ConditionType) -> bool:
        found = self.status.condition(kind)
        return found is not None and found.status == "True"


class ChildView(_Meta):
    """An object a session owns (its Pod, token Secret, workspace claim): whose it is."""

    def owned_by(self, uid: str) -> bool:
        return any(ref.get("uid") == uid for ref in self.meta.get("ownerReferences") or [])

    def held_by_another_session(self, uid: str) -> bool:
        """Owned by an AgentSession other than `uid`: left by an older session of the same name, and about to be
        deleted by the garbage collector."""
        refs = self.meta.get("ownerReferences") or []
        return any(ref.get("kind") == KIND and ref.get("uid") != uid for ref in refs)


class ContainerStatusView:
    """One container's status as the kubelet reports it: an entry of a pod's containerStatuses or
    initContainerStatuses. A terminated state stays the raw object (`exitCode`, `reason`, `message`)."""

    def __init__(self, body: Manifest) -> None:
        self.body = body
        self.state: Manifest = body.get("state") or {}

    @property
    def name(self) -> str:
        return _text(self.body, "name")

    @property
    def ready(self) -> bool:
        return bool(self.body.get("ready"))

    @property
    def started(self) -> bool:
        return bool(self.body.get("started"))

    @property
    def restart_count(self) -> int:
        return int(self.body.get("restartCount") or 0)

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def running_since(self) -> str | None:
        """When the running container started ("" when the kubelet does not say); None when it does not run."""
        running = self.state.get("running")
        return _text(running, "startedAt") if running is not None else None

    @property
    def waiting(self) -> Manifest | None:
        """The waiting state (`reason`, `message`), if the container waits."""
        waiting: Manifest | None = self.state.get("waiting") or None
        return waiting

    @property
    def terminated(self) -> Manifest | None:
        """How the container ended, while it is terminated."""
        terminated: Manifest | None = self.state.get("terminated") or None
        return terminated

    @property
    def last_terminated(self) -> Manifest | None:
        """How the container's previous run ended, once it has restarted."""
        terminated: Manifest | None = (self.body.get("lastState") or {}).get("terminated") or None
        return terminated

    @property
    def latest_exit(self) -> Manifest | None:
        """How it ended now, else how its previous run did; None when it never ended."""
        return self.terminated or self.last_terminated


class PodConditionView:
    """One of a pod's conditions (PodScheduled, ContainersReady, Ready, ...) as the kubelet or scheduler wrote it."""

    def __init__(self, body: Manifest) -> None:
        self.body = body

    @property
    def status(self) -> str:
        return _text(self.body, "status")

    @property
    def true(self) -> bool:
        return self.status == "True"

    @property
    def reason(self) -> str:
        return _text(self.body, "reason")

    @property
    def message(self) -> str:
        return _text(self.body, "message")

    @property
    def last_transition_time(self) -> str | None:
        return _optional_text(self.body, "lastTransitionTime")


class PodView(ChildView):
    """A Pod as the operator and the egress proxy read it: its status, its containers' statuses, its node."""

    @cached_property
    def _status(self) -> Manifest:
        status: Manifest = self.body.get("status") or {}
        return status

    @property
    def phase(self) -> str | None:
        return _optional_text(self._status, "phase")

    @property
    def reason(self) -> str | None:
        """The pod's own reason (Evicted, DeadlineExceeded, ...), set when the kubelet ends it."""
        return _optional_text(self._status, "reason")

    @property
    def message(self) -> str | None:
        return _optional_text(self._status, "message")

    @property
    def failed_reason(self) -> str | None:
        """Why the pod failed (its status reason, else PodFailed); None while it has not failed."""
        if self.phase != "Failed":
            return None
        return self.reason or reasons.POD_FAILED

    @property
    def ip(self) -> str | None:
        return _optional_text(self._status, "podIP")

    @property
    def node_name(self) -> str | None:
        return _optional_text(self.body.get("spec") or {}, "nodeName")

    @property
    def start_time(self) -> str | None:
        """When the kubelet accepted the pod (status.startTime)."""
        return _optional_text(self._status, "startTime")

    @cached_property
    def init_containers(self) -> list[ContainerStatusView]:
        return [ContainerStatusView(s) for s in self._status.get("initContainerStatuses") or []]

    @cached_property
    def containers(self) -> list[ContainerStatusView]:
        return [ContainerStatusView(s) for s in self._status.get("containerStatuses") or []]

    def init_container(self, name: str) -> ContainerStatusView | None:
        """The status of the init (or sidecar) container `name`, once the kubelet reports it."""
        return next((c for c in self.init_containers if c.name == name), None)

    def container(self, name: str) -> ContainerStatusView | None:
        """The status of the container `name`, once the kubelet reports it."""
        return next((c for c in self.containers if c.name == name), None)

    @property
    def restart_count(self) -> int:
        """The restarts of all its containers, init (and sidecar) containers included."""
        return sum(c.restart_count for c in self.init_containers + self.containers)

    def condition(self, kind: str) -> PodConditionView | None:
        found = next((c for c in self._status.get("conditions") or [] if c.get("type") == kind), None)
        return PodConditionView(found) if found is not None else None

    def condition_true(self, kind: str) -> bool:
        found = self.condition(kind)
        return found is not None and found.true


def pod_essentials(body: Mapping[str, Any]) -> Manifest:
    """The parts of a pod the operator reads (its metadata, the node it is on, its status): what the operator's
    indexes keep of each pod. The containers' spec and the metadata's managedFields are most of a pod's size and
    read by no one here; with thousands of sessions, whole copies were most of the operator's memory. Shares its
    parts with `body`: `packed_pod` is what keeps them."""
    metadata = {key: value for key, value in body.get("metadata", {}).items() if key != "managedFields"}
    essentials: Manifest = {
        "apiVersion": body.get("apiVersion", "v1"),
        "kind": body.get("kind", "Pod"),
        "metadata": metadata,
        "spec": {"nodeName": node} if (node := body.get("spec", {}).get("nodeName")) else {},
        "status": body.get("status") or {},
    }
    return essentials


def packed_pod(body: Mapping[str, Any]) -> str:
    """A pod's essentials as compact JSON, for a store that keeps thousands of pods for long.

    One string per pod instead of some hundred small objects: in a burst of sessions those were allocated among
    the burst's short-lived objects, and the allocator's arenas that held both could not be given back after it."""
    return json.dumps(pod_essentials(body), separators=(",", ":"))


def unpacked_pod(packed: str) -> Manifest:
    """The pod `packed_pod` stored, as a new object each time."""
    pod: Manifest = json.loads(packed)
    return pod


class EventView(_Meta):
    @property
    def message(self) -> str:
        return _text(self.body, "message")

    @property
    def last_seen(self) -> str | None:
        """When the event last happened: core/v1's lastTimestamp, or events.k8s.io's eventTime."""
        value = self.body.get("lastTimestamp") or self.body.get("eventTime")
        return str(value) if value else None
