"""Typed, read-only views over the raw objects the API returns, for the fields code reads.

The bodies stay plain JSON (the pure core and the wire see them unchanged); a view answers the questions
callers ask (is it being deleted? who owns it? which conditions are true?) in one place, instead of
`.get("status") or {}` chains spread over every caller.
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


class _Meta:
    def __init__(self, body: Manifest) -> None:
        self.body = body
        self.meta: Manifest = body.get("metadata") or {}

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace") or "")

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or "")

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid") or "")

    @property
    def resource_version(self) -> str:
        return str(self.meta.get("resourceVersion") or "")

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

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
    def created_at(self) -> str | None:
        value = self.meta.get("creationTimestamp")
        return str(value) if value else None

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


class PodView(ChildView):
    @property
    def phase(self) -> str | None:
        value = (self.body.get("status") or {}).get("phase")
        return str(value) if value else None

    @property
    def failed_reason(self) -> str | None:
        """Why the pod failed (its status reason, else PodFailed); None while it has not failed."""
        if self.phase != "Failed":
            return None
        return str((self.body.get("status") or {}).get("reason") or reasons.POD_FAILED)

    @property
    def ip(self) -> str | None:
        value = (self.body.get("status") or {}).get("podIP")
        return str(value) if value else None


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
        return str(self.body.get("message") or "")

    @property
    def last_seen(self) -> str | None:
        """When the event last happened: core/v1's lastTimestamp, or events.k8s.io's eventTime."""
        value = self.body.get("lastTimestamp") or self.body.get("eventTime")
        return str(value) if value else None
