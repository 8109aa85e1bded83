"""The one Kubernetes client of the operator and the gateway: async, on the official client's asyncio variant.

`Kube` is the interface both the real client (`ApiKube`) and the in-memory fake (`testing.fake_kube.FakeKube`)
offer: a handful of verbs over the kinds in `kube.resources`, plain JSON objects in and out (camelCase, as on the
wire, so the pure core never sees generated model classes), and typed errors from `kube.errors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client, config
from yarl import URL

from agentsession.api.manifest import Manifest
from agentsession.kube.errors import KubeError, KubeUnavailable, error_from_answer, error_from_status
from agentsession.kube.resources import Resource, resource_of

WatchType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
# A watch event carries a whole object; kubernetes_asyncio reads up to 2 MiB at once for them (etcd's limit on
# one object is 1.5 MiB).
WATCH_READ_BUFFER = 2**21
ApiCall = Callable[..., Awaitable[Any]]
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Listing:
    items: list[Manifest]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    type: WatchType
    object: Manifest


def object_call(verb: str, resource: Resource, namespace: str | None, name: str) -> str:
    """How a call on one object is named in its errors, by the real client and the fake alike:
    `patch status of Pod ns/name`, `get Namespace name`, `create TokenReview`."""
    where = f"{namespace}/{name}" if namespace else name
    return f"{verb} {resource.kind} {where}" if where else f"{verb} {resource.kind}"


def collection_call(verb: str, resource: Resource, namespace: str | None) -> str:
    """How a list or a watch is named in its errors: `list pods in ns`, `watch leases in all namespaces`."""
    return f"{verb} {resource.plural} in {namespace or 'all namespaces'}"


class Kube(Protocol):
    async def get(self, resource: Resource, namespace: str | None, name: str) -> Manifest:
        """The object; NotFound when it does not exist."""

    async def list(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Listing:
        """Every object in `namespace` (all namespaces for None) and the list's resourceVersion."""

    async def create(self, manifest: Manifest) -> Manifest:
        """Creates the object; Conflict (already_exists) when one of that name exists."""

    async def patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Manifest, *, status: bool = False
    ) -> Manifest:
        """A JSON merge patch of the object, or of its status subresource."""

    async def delete(
        self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> None:
        """Deletes the object; with `uid`, only that very object (Conflict if the name now holds another)."""

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int,
        inactivity_timeout: float,
        label_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes after `resource_version`, bookmarks included; Gone when that version is too old,
        TimeoutError when the connection stays silent for `inactivity_timeout` seconds."""

    async def close(self) -> None: ...


async def connect(
    kubeconfig: str | None = None, *, request_timeout: float = 30.0, max_connections: int = 100
) -> ApiKube:
    """In a pod the service account is used (its token re-read as it rotates); elsewhere the kubeconfig
    (`kubeconfig`, else $KUBECONFIG or ~/.kube/config). At most `max_connections` requests at once: each open
    connection keeps a TLS read buffer of 128 KiB or more."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = max_connections
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return ApiKube(_api_client(configuration), request_timeout=request_timeout)
        except config.ConfigException:
            pass
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return ApiKube(_api_client(configuration), request_timeout=request_timeout)


def _api_client(configuration: client.Configuration) -> client.ApiClient:
    """kubernetes_asyncio's client on a session that does not consult the environment for each request.

    Its own session trusts the environment, so aiohttp reads the proxy variables and ~/.netrc in a worker thread
    for every request, two thread hops each: in a burst of thousands of sessions, the largest single cost of the
    operator's client. The proxy variables are read here, once, instead: a proxy for the API server still applies.
    (The API server takes a bearer token or a client certificate, never .netrc's basic credentials.)"""
    if not configuration.proxy:
        configuration.proxy, auth = _environment_proxy(configuration.host)
        if auth is not None:
            configuration.proxy_headers = {"Proxy-Authorization": auth.encode()}
    api_client = client.ApiClient(configuration)
    rest = api_client.rest_client
    trusting: aiohttp.ClientSession = rest.pool_manager
    # The same connector (its TLS settings, its connection limit) and read buffer, on a session of its own.
    rest.pool_manager = aiohttp.ClientSession(connector=trusting.connector, read_bufsize=WATCH_READ_BUFFER)
    trusting.detach()
    return api_client


def _environment_proxy(url: str | None) -> tuple[str | None, aiohttp.BasicAuth | None]:
    """The proxy the environment names for `url` and its credentials, as aiohttp would find them (HTTPS_PROXY,
    NO_PROXY, ...)."""
    if not url:
        return None, None
    try:
        proxy, auth = get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None
    return str(proxy), auth


def _snake(kind: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def _unavailable(what: str, kind: str, error: BaseException) -> KubeUnavailable:
    return KubeUnavailable(f"{what} failed: {type(error).__name__} {error}".rstrip(), kind=kind)


class ApiKube:
    """`Kube` on kubernetes_asyncio's generated APIs, asked for the raw answer so bodies stay plain JSON."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self._api_client = api_client
        # The generated API of each built-in group this client serves, by group ("" is the core group).
        self._typed: dict[str, Any] = {
            "": client.CoreV1Api(api_client),
            "coordination.k8s.io": client.CoordinationV1Api(api_client),
            "networking.k8s.io": client.NetworkingV1Api(api_client),
        }
        self._custom = client.CustomObjectsApi(api_client)
        self._authn = client.AuthenticationV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self._timeout = request_timeout

    async def close(self) -> None:
        await self._api_client.close()

    async def _answer(self, what: str, kind: str, call: ApiCall, *args: Any, **kwargs: Any) -> Manifest:
        try:
            response = await call(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            async with response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise _unavailable(what, kind, error) from error
        if status >= 400:
            raise error_from_answer(what, status, text, kind)
        result: Manifest = json.loads(text) if text else {}
        return result

    def _typed_call(self, verb: str, resource: Resource, suffix: str = "") -> ApiCall:
        api = self._typed[resource.group]
        fn: ApiCall = getattr(api, f"{verb}_namespaced_{_snake(resource.kind)}{suffix}")
        return fn

    def _list_call(self, resource: Resource, namespace: str | None) -> tuple[ApiCall, tuple[str, ...]]:
        if resource.custom:
            if namespace is None:
                args: tuple[str, ...] = (resource.group, resource.version, resource.plural)
                return self._custom.list_cluster_custom_object, args
            args = (resource.group, resource.version, namespace, resource.plural)
            return self._custom.list_namespaced_custom_object, args
        if not resource.namespaced:
            cluster: ApiCall = getattr(self._typed[resource.group], f"list_{_snake(resource.kind)}")
            return cluster, ()
        if namespace is None:
            every: ApiCall = getattr(
                self._typed[resource.group], f"list_{_snake(resource.kind)}_for_all_namespaces"
            )
            return every, ()
        return self._typed_call("list", resource), (namespace,)

    async def get(self, resource: Resource, namespace: str | None, name: str) -> Manifest:
        what = object_call("get", resource, namespace, name)
        if resource.custom:
            call = self._custom.get_namespaced_custom_object
            args = (resource.group, resource.version, namespace, resource.plural, name)
            return await self._answer(what, resource.kind, call, *args)
        if not resource.namespaced:
            read: ApiCall = getattr(self._typed[resource.group], f"read_{_snake(resource.kind)}")
            return await self._answer(what, resource.kind, read, name)
        return await self._answer(what, resource.kind, self._typed_call("read", resource), name, namespace)

    async def list(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Listing:
        what = collection_call("list", resource, namespace)
        selectors = {
            key: value
            for key, value in (("field_selector", field_selector), ("label_selector", label_selector))
            if value
        }
        call, args = self._list_call(resource, namespace)
        body = await self._answer(what, resource.kind, call, *args, **selectors)
        version = str((body.get("metadata") or {}).get("resourceVersion", ""))
        return Listing(list(body.get("items") or []), version)

    async def create(self, manifest: Manifest) -> Manifest:
        resource = resource_of(manifest)
        meta = manifest.get("metadata") or {}
        namespace = meta.get("namespace")
        # A review has no name, and the client creates no other cluster-scoped object.
        what = object_call("create", resource, namespace, meta.get("name", "") if namespace else "")
        if resource.kind == "TokenReview":
            return await self._answer(what, resource.kind, self._authn.create_token_review, manifest)
        if resource.kind == "SubjectAccessReview":
            return await self._answer(what, resource.kind, self._authz.create_subject_access_review, manifest)
        if resource.custom:
            call = self._custom.create_namespaced_custom_object
            args = (resource.group, resource.version, namespace, resource.plural, manifest)
            return await self._answer(what, resource.kind, call, *args)
        return await self._answer(
            what, resource.kind, self._typed_call("create", resource), namespace, manifest
        )

    async def patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Manifest, *, status: bool = False
    ) -> Manifest:
        what = object_call("patch status of" if status else "patch", resource, namespace, name)
        if resource.custom:
            call = (
                self._custom.patch_namespaced_custom_object_status
                if status
                else self._custom.patch_namespaced_custom_object
            )
            args = (resource.group, resource.version, namespace, resource.plural, name, patch)
            return await self._answer(what, resource.kind, call, *args, _content_type=MERGE_PATCH)
        verb = self._typed_call("patch", resource, "_status" if status else "")
        return await self._answer(
            what, resource.kind, verb, name, namespace, patch, _content_type=MERGE_PATCH
        )

    async def delete(
        self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> None:
        what = object_call("delete", resource, namespace, name)
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        if resource.custom:
            call = self._custom.delete_namespaced_custom_object
            args = (resource.group, resource.version, namespace, resource.plural, name)
            await self._answer(what, resource.kind, call, *args, body=options)
            return
        await self._answer(
            what, resource.kind, self._typed_call("delete", resource), name, namespace, body=options
        )

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
        what = collection_call("watch", resource, namespace)
        call, args = self._list_call(resource, namespace)
        selector = {"label_selector": label_selector} if label_selector else {}
        try:
            response = await call(
                *args,
                **selector,
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                _preload_content=False,
                # (connect, read): a silent connection is dropped; the server ends a healthy one first.
                _request_timeout=(10, inactivity_timeout),
            )
        except (aiohttp.ClientError, OSError) as error:
            raise _unavailable(what, resource.kind, error) from error
        async with response:
            if response.status >= 400:
                raise error_from_answer(what, response.status, await response.text(), resource.kind)
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj: Manifest = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise _watch_error(what, obj, resource.kind)
                yield WatchEvent(event["type"], obj)


def _watch_error(what: str, status: Manifest, kind: str) -> KubeError:
    code = int(status.get("code") or 500)
    return error_from_status(
        what, code, str(status.get("reason") or ""), str(status.get("message") or ""), kind
    )
