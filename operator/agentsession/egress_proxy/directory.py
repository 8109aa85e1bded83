"""What the proxy knows of the cluster: session pods (by phantom digest and by IP), sessions, namespaces' defaults.

Only the few fields each decision reads are kept, in small frozen records, so a proxy serving thousands of
sessions holds kilobytes per session, not their manifests. `Directory` is filled by `apply_*` (from watches in
`KubeDirectory`, directly in tests); lookups are dictionary reads, never API calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError

from agentsession.api.constants import LABEL_MANAGED_BY, LABEL_SESSION, MANAGER
from agentsession.api.egress import (
    BUDGET_ANNOTATION,
    EGRESS_ALLOW_ANNOTATION,
    PHANTOM_DIGEST_ANNOTATION,
    Budget,
    NetworkSpec,
    Usage,
)
from agentsession.api.manifest import Key, Manifest
from agentsession.api.views import PodView, SessionView
from agentsession.kube.client import Kube
from agentsession.kube.errors import KubeError, NotFound
from agentsession.kube.informer import EventHandler, Informer
from agentsession.kube.resources import AGENT_SESSIONS, NAMESPACES, PODS, Resource
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
# Digests of pods that went away, so their phantoms are refused as revoked rather than unknown.
REVOKED_REMEMBERED: Final = 10_000
# The pods the operator makes (sessions' and pools'): the proxy never needs any other.
POD_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGER}"
_NAMESPACE_KEYS: Final = (EGRESS_ALLOW_ANNOTATION, BUDGET_ANNOTATION)
# How soon a change of a named namespace's defaults shows (the operator reads them as often).
READ_INTERVAL_SECONDS: Final = 30.0


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    ip: str | None
    digest: str | None
    session: str | None
    """The session that owns the pod (its `agentsession.dev/name` label); None for an unclaimed pool pod."""
    deleting: bool

    @property
    def key(self) -> Key:
        return self.namespace, self.name


@dataclass(frozen=True, slots=True)
class SessionInfo:
    namespace: str
    name: str
    uid: str
    agent_type: str
    base_url: str | None
    secret_name: str | None
    network: NetworkSpec | None
    budget: Budget | None
    usage: Usage | None

    @property
    def key(self) -> Key:
        return self.namespace, self.name

    def involved(self) -> Manifest:
        """The session as an Event's involvedObject."""
        return {
            "apiVersion": AGENT_SESSIONS.api_version,
            "kind": AGENT_SESSIONS.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


def _meta(obj: Manifest) -> Manifest:
    meta: Manifest = obj.get("metadata") or {}
    return meta


def _model(cls: type[M], value: object, where: str) -> M | None:
    if value is None:
        return None
    try:
        return cls.model_validate(value)
    except ValidationError as error:
        log.warning("ignoring %s: %s", where, str(error).splitlines()[0])
        return None


def pod_info(obj: Manifest) -> PodInfo:
    pod = PodView(obj)
    return PodInfo(
        namespace=pod.namespace,
        name=pod.name,
        ip=pod.ip,
        digest=pod.annotation(PHANTOM_DIGEST_ANNOTATION) or None,
        session=pod.labels.get(LABEL_SESSION) or None,
        deleting=pod.deleting,
    )


def session_info(obj: Manifest) -> SessionInfo:
    session = SessionView(obj)
    spec = session.spec
    agent = spec.get("agent") or {}
    where = f"{session.namespace}/{session.name}"
    return SessionInfo(
        namespace=session.namespace,
        name=session.name,
        uid=session.uid,
        agent_type=str(agent.get("type") or ""),
        base_url=(agent.get("model") or {}).get("baseURL") or None,
        secret_name=(agent.get("credentialsSecretRef") or {}).get("name") or None,
        network=_model(NetworkSpec, spec.get("network"), f"spec.network of {where}"),
        budget=_model(Budget, spec.get("budget"), f"spec.budget of {where}"),
        usage=_model(Usage, (obj.get("status") or {}).get("usage"), f"status.usage of {where}"),
    )


class Directory:
    def __init__(self) -> None:
        self._pods: dict[Key, PodInfo] = {}
        self._by_digest: dict[str, Key] = {}
        self._by_ip: dict[str, set[Key]] = {}
        self._revoked: OrderedDict[str, None] = OrderedDict()
        self._sessions: dict[Key, SessionInfo] = {}
        self._namespaces: dict[str, dict[str, str]] = {}

    @property
    def synced(self) -> bool:
        """Whether every source has been read once (readiness); a directory fed by hand always is."""
        return True

    # --- lookups ---

    def pod_by_digest(self, digest: str) -> PodInfo | None:
        key = self._by_digest.get(digest)
        return self._pods.get(key) if key else None

    def revoked(self, digest: str) -> bool:
        return digest in self._revoked

    def pods_at(self, ip: str) -> list[PodInfo]:
        return [self._pods[key] for key in self._by_ip.get(ip, ())]

    def session(self, namespace: str, name: str) -> SessionInfo | None:
        return self._sessions.get((namespace, name))

    def namespace_annotations(self, namespace: str) -> Mapping[str, str]:
        return self._namespaces.get(namespace, {})

    def sizes(self) -> dict[str, int]:
        return {"pods": len(self._pods), "sessions": len(self._sessions), "namespaces": len(self._namespaces)}

    # --- changes ---

    def apply_pod(self, kind: str, obj: Manifest) -> None:
        info = pod_info(obj)
        old = self._pods.pop(info.key, None)
        if old is not None:
            self._unindex(old)
        if kind == "DELETED":
            self._revoke(info.digest or (old.digest if old else None))
            return
        self._pods[info.key] = info
        if info.digest:
            self._by_digest[info.digest] = info.key
            self._revoked.pop(info.digest, None)
        if info.ip:
            self._by_ip.setdefault(info.ip, set()).add(info.key)

    def _unindex(self, pod: PodInfo) -> None:
        if pod.digest and self._by_digest.get(pod.digest) == pod.key:
            del self._by_digest[pod.digest]
        if pod.ip:
            keys = self._by_ip.get(pod.ip)
            if keys is not None:
                keys.discard(pod.key)
                if not keys:
                    del self._by_ip[pod.ip]

    def _revoke(self, digest: str | None) -> None:
        if not digest:
            return
        self._revoked[digest] = None
        self._revoked.move_to_end(digest)
        while len(self._revoked) > REVOKED_REMEMBERED:
            self._revoked.popitem(last=False)

    def apply_session(self, kind: str, obj: Manifest) -> None:
        info = session_info(obj)
        if kind == "DELETED":
            self._sessions.pop(info.key, None)
        else:
            self._sessions[info.key] = info

    def apply_namespace(self, kind: str, obj: Manifest) -> None:
        meta = _meta(obj)
        name = str(meta.get("name") or "")
        annotations = meta.get("annotations") or {}
        kept = {key: str(annotations[key]) for key in _NAMESPACE_KEYS if key in annotations}
        if kind == "DELETED" or not kept:
            self._namespaces.pop(name, None)
        else:
            self._namespaces[name] = kept


class NamespaceReader:
    """Each named namespace read by name every READ_INTERVAL_SECONDS: what a proxy serving named namespaces knows
    of their annotations, which change rarely."""

    def __init__(
        self, kube: Kube, names: list[str], handler: EventHandler, interval: float = READ_INTERVAL_SECONDS
    ) -> None:
        self._kube, self._names, self._handler, self._interval = kube, names, handler, interval
        self._first_round = asyncio.Event()
        self._tasks = Supervisor("namespace reads", log)

    @property
    def synced(self) -> bool:
        return self._first_round.is_set()

    def start(self) -> None:
        self._tasks.spawn(self._run(), "namespaces")

    async def stop(self) -> None:
        await self._tasks.close()

    async def _run(self) -> None:
        while True:
            for name in self._names:
                try:
                    self._handler("MODIFIED", await self._kube.get(NAMESPACES, None, name))
                except NotFound:
                    self._handler("DELETED", {"metadata": {"name": name}})
                except KubeError as error:
                    log.warning(
                        "could not read namespace %s (%s); its defaults stay as last read", name, error
                    )
            self._first_round.set()
            await asyncio.sleep(self._interval)


class KubeDirectory(Directory):
    """The directory kept current by watches of the operator's pods, the sessions and the namespaces."""

    def __init__(
        self,
        kube: Kube,
        namespaces: list[str] | None,
        *,
        inactivity_timeout: float = 60.0,
        server_timeout: int = 300,
    ) -> None:
        super().__init__()

        def informer(
            resource: Resource, handler: EventHandler, scope: list[str] | None, selector: str | None = None
        ) -> Informer:
            return Informer(
                kube,
                resource,
                handler,
                scope,
                label_selector=selector,
                inactivity_timeout=inactivity_timeout,
                server_timeout=server_timeout,
            )

        self._informers: list[Informer | NamespaceReader] = [
            informer(PODS, self.apply_pod, namespaces, POD_SELECTOR),
            informer(AGENT_SESSIONS, self.apply_session, namespaces),
            # Named namespaces are read by name: a Role in a namespace grants `get` of its own Namespace object,
            # never a list or watch of namespaces.
            NamespaceReader(kube, namespaces, self.apply_namespace)
            if namespaces
            else informer(NAMESPACES, self.apply_namespace, None),
        ]

    @property
    def synced(self) -> bool:
        return all(informer.synced for informer in self._informers)

    def start(self) -> None:
        for informer in self._informers:
            informer.start()

    async def stop(self) -> None:
        for informer in self._informers:
            await informer.stop()
