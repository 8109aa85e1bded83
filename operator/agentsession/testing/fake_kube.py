"""An in-memory API server for unit tests, with the `Kube` interface of the real client.

It keeps what the operator and the gateway rely on: resourceVersions that grow on every write, uids, generation
bumped by spec changes, AlreadyExists and uid-precondition conflicts, status as a subresource, finalizers
that turn a delete into a deletionTimestamp, watches that resume from a resourceVersion (and Gone once it is
compacted), simple field and label selectors. Tests can refuse a call the way admission or a quota would,
and read back every call made, in order.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from agentsession.api.manifest import Manifest
from agentsession.api.times import utc_now
from agentsession.kube.client import Listing, WatchEvent, WatchType, collection_call, object_call
from agentsession.kube.errors import KubeError, error_from_status
from agentsession.kube.resources import Resource, resource_of

ObjectKey = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name
Refusal = Callable[[str, Manifest], KubeError | None]


@dataclass(frozen=True)
class Call:
    verb: str
    kind: str
    namespace: str | None
    name: str


@dataclass
class _History:
    events: list[tuple[int, WatchEvent]] = field(default_factory=list)
    compacted_below: int = 0
    # Replaced on every write: a watcher waits on the one it saw, so no wake-up is missed between checks.
    changed: asyncio.Event = field(default_factory=asyncio.Event)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _lookup(obj: Manifest, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _matches(obj: Manifest, field_selector: str | None, label_selector: str | None) -> bool:
    for term in filter(None, (field_selector or "").split(",")):
        path, _, wanted = term.partition("=")
        if _lookup(obj, path) != wanted:
            return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        key, _, wanted = term.partition("=")
        if key not in labels or (wanted and labels[key] != wanted):
            return False
    return True


def _now() -> str:
    return utc_now("seconds")


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[ObjectKey, Manifest] = {}
        self.calls: list[Call] = []
        self._versions = itertools.count(1)
        self._history: dict[str, _History] = {}
        self._refusals: list[tuple[str, str, Refusal]] = []
        self.closed = False

    # --- what tests arrange and read ---

    def refuse(
        self, verb: str, kind: str, status: int, message: str, reason: str = "", *, times: int = 1
    ) -> None:
        """The next `times` calls `verb` on `kind` are refused with this HTTP status and API message."""
        remaining = [times]

        def refusal(what: str, _: Manifest) -> KubeError | None:
            if remaining[0] <= 0:
                return None
            remaining[0] -= 1
            return error_from_status(what, status, reason, message, kind)

        self._refusals.append((verb, kind, refusal))

    def put(self, manifest: Manifest) -> Manifest:
        """Stores an object as another actor would (the kubelet, a user), bypassing refusals."""
        return self._store(
            copy.deepcopy(manifest), "ADDED" if self._key(manifest) not in self.objects else "MODIFIED"
        )

    def find(self, kind: str, namespace: str, name: str) -> Manifest | None:
        obj = self.objects.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def of_kind(self, kind: str) -> list[Manifest]:
        return [copy.deepcopy(obj) for (k, _, _), obj in sorted(self.objects.items()) if k == kind]

    def verbs(self, kind: str | None = None) -> list[str]:
        """`verb Kind name` of every call so far (optionally of one kind), in order."""
        return [f"{c.verb} {c.kind} {c.name}" for c in self.calls if kind is None or c.kind == kind]

    def compact(self) -> None:
        """Forgets watch history: a watch from an older resourceVersion now gets Gone, as after etcd compaction."""
        for history in self._history.values():
            history.compacted_below = self._current_version() + 1
            history.events.clear()

    # --- the Kube interface ---

    async def get(self, resource: Resource, namespace: str | None, name: str) -> Manifest:
        what = object_call("get", resource, namespace, name)
        self._record("get", resource.kind, namespace, name)
        self._check_refusal("get", resource.kind, what, {})
        obj = self.objects.get((resource.kind, namespace or "", name))
        if obj is None:
            raise error_from_status(
                what, 404, "NotFound", f'{resource.plural} "{name}" not found', resource.kind
            )
        return copy.deepcopy(obj)

    async def list(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Listing:
        self._record("list", resource.kind, namespace, "")
        self._check_refusal("list", resource.kind, collection_call("list", resource, namespace), {})
        items = [
            copy.deepcopy(obj)
            for (kind, ns, _), obj in sorted(self.objects.items())
            if kind == resource.kind
            and (namespace is None or ns == namespace)
            and _matches(obj, field_selector, label_selector)
        ]
        return Listing(items, str(self._current_version()))

    async def create(self, manifest: Manifest) -> Manifest:
        resource = resource_of(manifest)
        meta = manifest.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name", "")
        what = object_call("create", resource, namespace, name)
        self._record("create", resource.kind, namespace, name)
        self._check_refusal("create", resource.kind, what, manifest)
        if resource.kind in ("TokenReview", "SubjectAccessReview"):
            return copy.deepcopy(manifest)
        if self._key(manifest) in self.objects:
            message = f'{resource.plural} "{name}" already exists'
            raise error_from_status(what, 409, "AlreadyExists", message, resource.kind)
        obj = copy.deepcopy(manifest)
        obj["metadata"] = {
            **meta,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": _now(),
            "generation": 1,
        }
        return copy.deepcopy(self._store(obj, "ADDED"))

    async def patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Manifest, *, status: bool = False
    ) -> Manifest:
        what = object_call("patch status of" if status else "patch", resource, namespace, name)
        self._record("patch-status" if status else "patch", resource.kind, namespace, name)
        self._check_refusal("patch-status" if status else "patch", resource.kind, what, patch)
        current = self.objects.get((resource.kind, namespace or "", name))
        if current is None:
            raise error_from_status(
                what, 404, "NotFound", f'{resource.plural} "{name}" not found', resource.kind
            )
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"].get("resourceVersion"):
            # As the API server does: a resourceVersion in the patch is a precondition.
            message = (
                f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been modified'
            )
            raise error_from_status(what, 409, "Conflict", message, resource.kind)
        if status:
            updated = {**current, "status": merge_patch(current.get("status"), patch.get("status"))}
        else:
            # With a status subresource, the main resource ignores status changes (as the API server does).
            updated = merge_patch(current, {k: v for k, v in patch.items() if k != "status"})
            if updated.get("spec") != current.get("spec"):
                updated["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + 1
        return copy.deepcopy(self._store(updated, "MODIFIED"))

    async def delete(
        self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> None:
        what = object_call("delete", resource, namespace, name)
        self._record("delete", resource.kind, namespace, name)
        self._check_refusal("delete", resource.kind, what, {})
        key = (resource.kind, namespace or "", name)
        current = self.objects.get(key)
        if current is None:
            raise error_from_status(
                what, 404, "NotFound", f'{resource.plural} "{name}" not found', resource.kind
            )
        if uid is not None and current["metadata"].get("uid") != uid:
            message = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {current['metadata']['uid']}"
            raise error_from_status(what, 409, "Conflict", message, resource.kind)
        if current["metadata"].get("finalizers"):
            if not current["metadata"].get("deletionTimestamp"):
                self._store(merge_patch(current, {"metadata": {"deletionTimestamp": _now()}}), "MODIFIED")
            return
        self.remove(resource.kind, namespace or "", name)

    def remove(self, kind: str, namespace: str, name: str) -> None:
        """Removes an object for good (its finalizers done, or its pod gone from the node)."""
        obj = self.objects.pop((kind, namespace, name))
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self._emit(kind, WatchEvent("DELETED", copy.deepcopy(obj)), int(obj["metadata"]["resourceVersion"]))

    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int,
        inactivity_timeout: float,
        label_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        self._record("watch", resource.kind, namespace, "")
        history = self._history.setdefault(resource.kind, _History())
        after = int(resource_version or 0)
        if after < history.compacted_below - 1:
            raise error_from_status(
                collection_call("watch", resource, namespace),
                410,
                "Expired",
                "too old resource version",
                resource.kind,
            )
        deadline = asyncio.get_running_loop().time() + timeout_seconds
        while True:
            changed = history.changed
            pending = [
                (version, event)
                for version, event in history.events
                if version > after
                and (namespace is None or (event.object.get("metadata") or {}).get("namespace") == namespace)
                and _matches(event.object, None, label_selector)
            ]
            for version, event in pending:
                after = version
                yield WatchEvent(event.type, copy.deepcopy(event.object))
            if pending:
                continue
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return  # the server ends a watch at its timeout; the client watches again
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return

    async def close(self) -> None:
        self.closed = True

    # --- internals ---

    def _current_version(self) -> int:
        return max((int(o["metadata"]["resourceVersion"]) for o in self.objects.values()), default=0)

    @staticmethod
    def _key(manifest: Manifest) -> ObjectKey:
        meta = manifest.get("metadata") or {}
        return (str(manifest.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))

    def _record(self, verb: str, kind: str, namespace: str | None, name: str) -> None:
        self.calls.append(Call(verb, kind, namespace, name))

    def _check_refusal(self, verb: str, kind: str, what: str, body: Manifest) -> None:
        for refused_verb, refused_kind, refusal in self._refusals:
            if refused_verb == verb and refused_kind == kind and (error := refusal(what, body)) is not None:
                raise error

    def _store(self, obj: Manifest, event_type: WatchType) -> Manifest:
        version = next(self._versions)
        obj.setdefault("metadata", {})["resourceVersion"] = str(version)
        obj["metadata"].setdefault("uid", str(uuid.uuid4()))
        self.objects[self._key(obj)] = obj
        self._emit(str(obj.get("kind")), WatchEvent(event_type, copy.deepcopy(obj)), version)
        return obj

    def _emit(self, kind: str, event: WatchEvent, version: int) -> None:
        history = self._history.setdefault(kind, _History())
        history.events.append((version, event))
        history.changed.set()
        history.changed = asyncio.Event()
