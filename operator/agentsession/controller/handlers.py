"""kopf wiring: every handler only records what it saw and triggers the one reconcile.

Run with `agentsession-operator` (`controller.main`), which serves the metrics and starts kopf only while this
replica may act (see `controller.leader`).
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
import kopf

from agentsession.agentctl_client import http_connector
from agentsession.api.constants import (
    GROUP,
    LABEL_CLAIMED_FROM,
    LABEL_POOL,
    LABEL_SESSION,
    PLURAL,
    POOL_KIND,
    POOL_PLURAL,
    VERSION,
)
from agentsession.api.views import packed_pod, unpacked_pod
from agentsession.contract.auth import TokenDeriver, read_key
from agentsession.controller import metrics
from agentsession.controller.config import OperatorConfig
from agentsession.controller.egress_address import ProxyAddress
from agentsession.controller.namespaces import NamespaceAnnotations
from agentsession.controller.pool_reconciler import PoolReconciler
from agentsession.controller.reconciler import Reconciler
from agentsession.controller.triggers import budget_turned, needs_reconcile
from agentsession.controller.watch_health import WatchHealth, WatchStalled, liveness
from agentsession.controller.work_queue import WorkQueue
from agentsession.kube.client import Kube, connect
from agentsession.kube.resources import AGENT_SESSION_POOLS, AGENT_SESSIONS, Resource
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)


def _served(namespace: str | None, memo: kopf.Memo, **_: Any) -> bool:
    """Namespace patterns are served by a cluster-wide watch filtered here, not by kopf's namespace observer:
    that observer skips the namespaces it lists when its watch (re)starts, so a namespace created at that
    moment would never be served."""
    config: OperatorConfig = memo["config"]
    return config.watches_fixed_namespaces or _watched(namespace or "", config.namespaces)


SESSIONS: dict[str, Any] = {"group": GROUP, "version": VERSION, "plural": PLURAL, "when": _served}
SESSION_PODS: dict[str, Any] = {"labels": {LABEL_SESSION: kopf.PRESENT}, "when": _served}
POOL_PODS: dict[str, Any] = {"labels": {LABEL_POOL: kopf.PRESENT}, "when": _served}
CLAIMED_PODS: dict[str, Any] = {"labels": {LABEL_CLAIMED_FROM: kopf.PRESENT}, "when": _served}
POOLS: dict[str, Any] = {"group": GROUP, "version": VERSION, "plural": POOL_PLURAL, "when": _served}
FINALIZER = f"{GROUP}/finalizer"


@dataclass
class OperatorState:
    config: OperatorConfig
    kube: Kube
    http: aiohttp.ClientSession
    queue: WorkQueue
    pool_queue: WorkQueue
    watch_health: WatchHealth
    namespaces: NamespaceAnnotations
    proxy: ProxyAddress | None
    background: Supervisor


def _state(memo: kopf.Memo) -> OperatorState:
    state: OperatorState = memo["state"]
    return state


class PoolsOnlyDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base, built for pools only.

    kopf builds one (a deep copy of the object) for every event of every kind it watches, to detect changes for
    create and update handlers; only pools have those here (sessions and pods trigger on every event). For pods and
    sessions the copies were an eighth of the operator's CPU in a burst, and nothing read them."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        if body.get("kind") != POOL_KIND:
            return kopf.BodyEssence()
        return super().build(body=body, extra_fields=extra_fields)


def configure_settings(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    settings.persistence.finalizer = FINALIZER
    # Status is structural and pruned, so kopf keeps its bookkeeping in annotations, not in status.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = PoolsOnlyDiffBase(prefix=GROUP, key="last-handled-configuration")
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.inactivity_timeout = 90
    settings.networking.request_timeout = 30
    # The reconciler posts its own Events; kopf's would repeat handler log lines as Events.
    settings.posting.level = logging.ERROR
    settings.execution.max_workers = 8
    # kopf waits this long for more events of an object before handling the last; the handlers only trigger the
    # work queue, which coalesces by itself, so waiting would only delay every status by it.
    settings.batching.batch_window = 0.001
    # Serving named namespaces needs no namespace or CRD discovery, nor the cluster-wide RBAC it would take.
    settings.scanning.disabled = config.watches_fixed_namespaces


# The index functions are coroutines so that kopf runs them on its loop, not in its thread pool: a thread hop per
# pod event was a tenth of the operator's CPU in a burst of sessions.
@kopf.index("pods", **SESSION_PODS)
async def session_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], Any]:
    return {(namespace or "", labels[LABEL_SESSION]): packed_pod(body)}


@kopf.index("pods", **POOL_PODS)
async def pool_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], Any]:
    return {(namespace or "", labels[LABEL_POOL]): packed_pod(body)}


@kopf.index("pods", **CLAIMED_PODS)
async def claimed_pods(
    namespace: str | None, name: str, labels: kopf.Labels, **_: Any
) -> dict[tuple[str, str], Any]:
    # Only counted (a pool's status.claimed): the name is enough.
    return {(namespace or "", labels[LABEL_CLAIMED_FROM]): packed_pod({"metadata": {"name": name}})}


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    # kopf passes every index to every handler by its name; the reconciler reads pods from this one.
    indexes: dict[str, kopf.Index[tuple[str, str], Any]] = {
        LABEL_SESSION: kwargs["session_pods"],
        LABEL_POOL: kwargs["pool_pods"],
        LABEL_CLAIMED_FROM: kwargs["claimed_pods"],
    }
    config: OperatorConfig = memo["config"]
    configure_settings(settings, config)
    # A reconcile makes one request at a time, but a status write goes out with its Events.
    kube = await connect(max_connections=2 * config.max_concurrent_reconciles)
    http = aiohttp.ClientSession()

    def observe_call(call: str, outcome: str, seconds: float) -> None:
        metrics.AGENTCTL_CALL_SECONDS.labels(call=call, outcome=outcome).observe(seconds)

    agentctl = http_connector(http, timeout=config.start_timeout_seconds, on_call=observe_call)

    def pod_lookup(namespace: str, label: str, value: str) -> list[dict[str, Any]]:
        return [unpacked_pod(packed) for packed in indexes[label].get((namespace, value), [])]

    # main() checked the key file already.
    assert config.agentctl_key_file is not None
    token_of = TokenDeriver(read_key(config.agentctl_key_file))
    background = Supervisor("operator", log)

    def moved(_: str | None) -> None:
        background.spawn(_everything(memo), "reconcile everything for the egress proxy's new address")

    proxy = None
    if config.egress_proxy is not None and config.agentctl_network_policy is None:
        log.warning(
            "egress_proxy is set but agentctl_network_policy is not: session pods get the proxy and a phantom "
            "key, but nothing keeps them from other destinations; set agentctl_network_policy (the chart's "
            "networkPolicy.enabled) to enforce it"
        )
    if config.egress_proxy is not None:
        # Read before any reconcile runs, so that no session waits for an address the operator could know.
        proxy = ProxyAddress(kube, config.egress_proxy, moved)
        await proxy.start()

    def proxy_address() -> str | None:
        return proxy.address if proxy is not None else None

    namespaces = NamespaceAnnotations(kube)
    reconciler = Reconciler(
        config,
        kube,
        agentctl,
        pod_lookup,
        token_of,
        proxy_address=proxy_address,
        namespaces=namespaces,
    )
    pools = PoolReconciler(
        config,
        kube,
        pod_lookup,
        token_of,
        proxy_address=proxy_address,
    )
    memo["state"] = OperatorState(
        config=config,
        kube=kube,
        http=http,
        queue=WorkQueue(reconciler.reconcile, config.max_concurrent_reconciles),
        pool_queue=WorkQueue(pools.reconcile, config.max_concurrent_reconciles),
        watch_health=WatchHealth(config.watch_stall_seconds),
        namespaces=namespaces,
        proxy=proxy,
        background=background,
    )


async def _everything(memo: kopf.Memo) -> None:
    """The egress proxy's address changed: every session and pool is reconciled again (pods that waited for
    it are made, pods built for the old address replaced)."""
    state: OperatorState | None = memo.get("state")
    if state is None:
        return  # still starting: every object is seen as it is listed
    for key in await _served_keys(state, AGENT_SESSIONS):
        state.queue.trigger(key)
    for key in await _served_keys(state, AGENT_SESSION_POOLS):
        state.pool_queue.trigger(key)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    state = _state(memo)
    if state.proxy is not None:
        await state.proxy.stop()
    await state.background.close()
    await state.queue.shutdown()
    await state.pool_queue.shutdown()
    await state.http.close()
    await state.kube.close()


# One handler for every event of a session, instead of kopf's create/update/delete handlers: those have kopf compute
# each event's diff against a copy kept in an annotation and patch that annotation, a seventh of the operator's CPU
# and one more write per session in a burst, for a reconciler that reads the session itself anyway.
@kopf.on.event(**SESSIONS)
async def session_event(
    type: str | None, namespace: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    state, key = _state(memo), (namespace or "", name)
    if type == "DELETED":
        state.watch_health.forget(key)
    else:
        state.watch_health.record(key, str(body.get("metadata", {}).get("resourceVersion")))
    if needs_reconcile(type, body) or budget_turned(
        body, state.namespaces.cached(key[0]), state.config.default_budget
    ):
        state.queue.trigger(key)


@kopf.on.event("pods", **SESSION_PODS)
async def pod_changed(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    _state(memo).queue.trigger((namespace or "", labels[LABEL_SESSION]))


@kopf.on.resume(**POOLS)
@kopf.on.create(**POOLS)
@kopf.on.update(**POOLS)
async def pool_changed(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    _state(memo).pool_queue.trigger((namespace or "", name))


@kopf.on.event("pods", **POOL_PODS)
async def pool_pod_changed(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    _state(memo).pool_queue.trigger((namespace or "", labels[LABEL_POOL]))


@kopf.on.event("pods", **CLAIMED_PODS)
async def claimed_pod_changed(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    # A claim takes a pod out of its pool: the pool refills and counts it.
    _state(memo).pool_queue.trigger((namespace or "", labels[LABEL_CLAIMED_FROM]))


def _watched(namespace: str, patterns: list[str]) -> bool:
    # The same glob patterns kopf accepts for --namespace.
    return not patterns or any(fnmatch.fnmatchcase(namespace, pattern) for pattern in patterns)


@kopf.on.probe(id="watch")
async def watch_is_live(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    state = _state(memo)
    try:
        return await liveness(state.watch_health, _listed_versions(state), time.monotonic())
    except WatchStalled as error:
        raise kopf.PermanentError(str(error)) from error


async def _listed_versions(state: OperatorState) -> dict[tuple[str, str], str]:
    """The resourceVersion of every served AgentSession, as the API lists them now."""
    return {
        (item["metadata"]["namespace"], item["metadata"]["name"]): str(item["metadata"]["resourceVersion"])
        for item in await _served_items(state, AGENT_SESSIONS)
    }


async def _served_keys(state: OperatorState, resource: Resource) -> list[tuple[str, str]]:
    return [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in await _served_items(state, resource)]


async def _served_items(state: OperatorState, resource: Resource) -> list[dict[str, Any]]:
    namespaces: list[str | None] = (
        list(state.config.namespaces) if state.config.watches_fixed_namespaces else [None]
    )
    return [
        item
        for namespace in namespaces
        for item in (await state.kube.list(resource, namespace)).items
        if _watched(item["metadata"]["namespace"], state.config.namespaces)
    ]
