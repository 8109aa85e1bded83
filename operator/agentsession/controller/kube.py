"""The operator's calls to the Kubernetes API, on the official client, moved off the event loop.

Objects go in and come out as plain JSON dicts (camelCase, as on the wire) so the pure core never sees
client model classes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from agentsession.api.constants import GROUP, PLURAL, VERSION

Manifest = dict[str, Any]
T = TypeVar("T")
log = logging.getLogger(__name__)


class KubeError(RuntimeError):
    """A Kubernetes API call failed; the message names the call and the API's answer.

    `status` is the HTTP status (None when no answer came), `api_message` the API server's own words, and
    `kind` the kind of object the call was about, so callers can tell a refusal from an outage."""

    def __init__(
        self, message: str, *, status: int | None = None, api_message: str = "", kind: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.api_message = api_message
        self.kind = kind


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """In a pod the service account is used; elsewhere the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    if kubeconfig is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return client.ApiClient()
        except config.ConfigException:
            pass
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig, client_configuration=configuration
    )
    return client.ApiClient(configuration)


def _json(response: Any) -> Manifest:
    data: Manifest = json.loads(response.data)
    return data


class KubeApi:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Manifest | None:
        """Runs one call in a thread; None for 404, KubeError for any other failure."""
        try:
            response = await asyncio.to_thread(fn, *args, _preload_content=False, **kwargs)
        except ApiException as error:
            if error.status == 404:
                return None
            raise KubeError(f"{what} failed: HTTP {error.status} {_api_message(error)}") from error
        return _json(response)

    async def get_session(self, namespace: str, name: str) -> Manifest | None:
        return await self._call(
            f"get agentsession {namespace}/{name}",
            self._custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
        )

    async def list_sessions(self, namespaces: list[str] | None) -> list[Manifest]:
        """Every AgentSession in these namespaces, or cluster-wide for None.

        Listing namespace by namespace keeps the operator within namespace-scoped RBAC.
        """
        if namespaces is None:
            result = await self._call(
                "list agentsessions", self._custom.list_cluster_custom_object, GROUP, VERSION, PLURAL
            )
            return list((result or {}).get("items", []))
        items: list[Manifest] = []
        for namespace in namespaces:
            result = await self._call(
                f"list agentsessions in {namespace}",
                self._custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
            )
            items.extend((result or {}).get("items", []))
        return items

    async def patch_session_status(self, namespace: str, name: str, status: Manifest) -> Manifest | None:
        """A merge patch of the whole status: the operator is its only writer, lists are replaced whole."""
        return await self._call(
            f"patch status of agentsession {namespace}/{name}",
            self._custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"status": status},
        )

    async def patch_session_spec(self, namespace: str, name: str, spec: Manifest) -> Manifest | None:
        return await self._call(
            f"patch spec of agentsession {namespace}/{name}",
            self._custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"spec": spec},
        )

    async def create(self, manifest: Manifest) -> tuple[Manifest, bool]:
        """Creates a Pod, Secret or PersistentVolumeClaim, or returns the existing one: (object, created)."""
        kind = manifest["kind"]
        namespace = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        calls: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
            "Pod": (self._core.create_namespaced_pod, self._core.read_namespaced_pod),
            "Secret": (self._core.create_namespaced_secret, self._core.read_namespaced_secret),
            "PersistentVolumeClaim": (
                self._core.create_namespaced_persistent_volume_claim,
                self._core.read_namespaced_persistent_volume_claim,
            ),
        }
        create, read = calls[kind]
        try:
            response = await asyncio.to_thread(create, namespace, manifest, _preload_content=False)
            return _json(response), True
        except ApiException as error:
            if error.status != 409:
                said = _api_message(error)
                raise KubeError(
                    f"create {kind} {namespace}/{name} failed: HTTP {error.status} {said}",
                    status=error.status,
                    api_message=said,
                    kind=kind,
                ) from error
        existing = await self._call(f"read {kind} {namespace}/{name}", read, name, namespace)
        if existing is None:
            raise KubeError(f"{kind} {namespace}/{name} exists but could not be read back; will retry")
        return existing, False

    async def get_secret(self, namespace: str, name: str) -> Manifest | None:
        return await self._call(
            f"get secret {namespace}/{name}", self._core.read_namespaced_secret, name, namespace
        )

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Deletes exactly the pod we looked at (uid precondition), never a newer one of the same name."""
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            await asyncio.to_thread(self._core.delete_namespaced_pod, name, namespace, body=body)
        except ApiException as error:
            if error.status in (404, 409):
                return
            raise KubeError(
                f"delete pod {namespace}/{name} failed: HTTP {error.status} {_api_message(error)}"
            ) from error

    async def warning_events(self, namespace: str, involved_uid: str, reason: str) -> list[Manifest]:
        """Warning events `reason` about one object, e.g. the kubelet's Unhealthy probe reports."""
        result = await self._call(
            f"list events in {namespace}",
            self._core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.uid={involved_uid},reason={reason},type=Warning",
        )
        return list((result or {}).get("items", []))

    async def post_event(
        self, involved: Manifest, event_type: str, reason: str, message: str, component: str
    ) -> None:
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        namespace = involved["namespace"]
        # Named like client-go's recorder (name.<unix nanoseconds in hex>): timestamps keep only seconds, and the
        # name keeps a session's events in the order they happened.
        name = f"{involved['name']}.{time.time_ns():x}"
        body: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await asyncio.to_thread(
                self._core.create_namespaced_event, namespace, body, _preload_content=False
            )
        except ApiException as error:
            # Events are best effort: losing one must not fail a reconcile.
            log.warning("posting event %s for %s failed: HTTP %s", reason, involved["name"], error.status)


def _api_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "").get("message", error.reason))
    except (TypeError, ValueError, AttributeError):
        return str(error.reason)
