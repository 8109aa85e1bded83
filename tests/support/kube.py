"""Small helpers over the official client for tests that drive a real API server."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from kubernetes import client

from agentsession.api.constants import (
    GROUP,
    LABEL_CLAIMED_FROM,
    LABEL_POOL,
    PLURAL,
    POOL_PLURAL,
    VERSION,
    token_secret_name,
)
from tests.conftest import wait_until

NOWHERE = {"agentsession.dev/test-node": "none"}


class Sessions:
    def __init__(self, api: Any, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    def create(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AgentSession",
            "metadata": {"name": name},
            "spec": spec,
        }
        result: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, body
        )
        return result

    def get(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return result

    def patch_spec(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec}
        )
        return result

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        conditions = self.get(name).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == kind), None)

    def has_condition(
        self, name: str, kind: str, status: str, reason: str | None = None
    ) -> dict[str, Any] | None:
        found = self.condition(name, kind)
        if found and found["status"] == status and (reason is None or found["reason"] == reason):
            return found
        return None

    async def until_ready(self, name: str) -> dict[str, Any]:
        """The session's Ready condition once it is True, waited for off the event loop (a pod on a node)."""
        return await asyncio.to_thread(
            wait_until, f"{name} Ready=True", lambda: self.has_condition(name, "Ready", "True"), 180
        )

    def stem(self, name: str) -> str:
        """What the session's children are named after: its name, or the warm pod's it claimed from a pool."""
        startup = (self.get(name).get("status") or {}).get("startup") or {}
        return str(startup.get("member") or name)

    def token(self, name: str) -> str:
        secret = self.core.read_namespaced_secret(token_secret_name(self.stem(name)), self.namespace)
        return base64.b64decode(secret.data["token"]).decode()

    def pod(self, name: str) -> Any:
        return self.core.read_namespaced_pod(f"{self.stem(name)}-agent", self.namespace)

    def pod_gone(self, name: str, uid: str) -> bool:
        """Whether the session's pod with `uid` no longer exists (none, or another in its place)."""
        try:
            return bool(self.pod(name).metadata.uid != uid)
        except Exception:  # the API's 404
            return True

    def events(self, name: str) -> list[Any]:
        events = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=AgentSession"
        )
        return list(events.items)

    def has_events(self, name: str, *reasons: str) -> list[str] | None:
        """Every event reason of the session once all of `reasons` are among them, else None.

        The operator posts events after it writes status, so a test that has just seen a condition polls this.
        """
        seen = [event.reason for event in self.events(name)]
        return seen if set(reasons) <= set(seen) else None

    def play_kubelet(
        self, name: str, *, agentctl_ready: bool, started: bool = True, restarts: int = 0
    ) -> None:
        """Writes the pod status a kubelet would, for pods pinned to no node (the API tier has no kubelet)."""
        pod = self.pod(name)
        now = "2026-01-01T00:00:00Z"
        running = {"running": {"startedAt": now}}
        status = {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "startTime": now,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
            "initContainerStatuses": [
                {
                    "name": "agentctl",
                    "image": pod.spec.init_containers[-1].image,
                    "imageID": "",
                    "ready": agentctl_ready,
                    "started": started,
                    "restartCount": restarts,
                    "state": running,
                }
            ],
            "containerStatuses": [
                {
                    "name": "agent",
                    "image": pod.spec.containers[0].image,
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": running,
                }
            ],
        }
        self.core.patch_namespaced_pod_status(f"{name}-agent", self.namespace, {"status": status})

    def fail_pod(self, name: str, reason: str, message: str) -> None:
        """Marks the session's pod Failed, as the kubelet does on eviction or when activeDeadlineSeconds ends."""
        status = {"phase": "Failed", "reason": reason, "message": message}
        self.core.patch_namespaced_pod_status(f"{name}-agent", self.namespace, {"status": status})


class Pools:
    """AgentSessionPools (and their warm and claimed pods) in a test's namespace."""

    def __init__(self, kube_api: Any, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(kube_api)
        self.core = client.CoreV1Api(kube_api)
        self.namespace = namespace

    def create(self, name: str, **spec: Any) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentSessionPool",
                "metadata": {"name": name}, "spec": {"template": {"agent": {"type": "demo"}}, **spec}}  # fmt: skip
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, POOL_PLURAL, body)

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, POOL_PLURAL, name, {"spec": spec}
        )

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, POOL_PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        pool = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, POOL_PLURAL, name)
        status: dict[str, Any] = pool.get("status") or {}
        return status

    def warm(self, name: str) -> list[Any]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL_POOL}={name}").items
        return [p for p in pods if p.metadata.deletion_timestamp is None]

    def claimed(self, name: str) -> list[Any]:
        return self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{LABEL_CLAIMED_FROM}={name}"
        ).items

    async def until_ready(self, name: str, ready: int) -> None:
        def settled() -> bool:
            status = self.status(name)
            return status.get("readyReplicas") == ready and len(self.warm(name)) == ready

        await asyncio.to_thread(wait_until, f"pool {name} with {ready} ready", settled, 180)
