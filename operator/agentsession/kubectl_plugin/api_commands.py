"""The commands that need no gateway, only the user's kubeconfig and the API server's view of a session:
suspend and resume (a patch of spec.suspend), get and status."""

from __future__ import annotations

import json
import time
from typing import Any

from agentsession.kubectl_plugin.credentials import Target
from agentsession.kubectl_plugin.errors import PluginError
from agentsession.kubectl_plugin.names import GROUP, PLURAL, VERSION
from agentsession.kubectl_plugin.render import budget_exhausted, describe_session, session_rows, table


def set_suspend(target: Target, suspend: bool, wait: bool, timeout: float) -> int:
    """Patches spec.suspend with the user's own credentials; with `wait`, until the session got there."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(target.cluster.api())
    where = f"{PLURAL}.{GROUP}/{target.name} in namespace {target.namespace}"
    try:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, target.namespace, PLURAL, target.name, {"spec": {"suspend": suspend}}
        )
    except ApiException as exc:
        if exc.status == 404:
            raise PluginError(f"no {where}") from exc
        raise PluginError(f"cannot patch {where}: {exc.status} {exc.reason}") from exc
    print(f"agentsession.{GROUP}/{target.name} {'suspended' if suspend else 'resumed'}")
    if not wait:
        return 0
    wanted = "Suspended" if suspend else "Ready"
    deadline = time.monotonic() + timeout
    last = None
    while True:
        body: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, target.namespace, PLURAL, target.name
        )
        status = body.get("status") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        reason = (conditions.get("Ready") or {}).get("reason")
        now = f"{status.get('phase')}/{reason}"
        if now != last:
            print(f"phase/reason: {now}")
            last = now
        if (
            status.get("observedGeneration") == body["metadata"].get("generation")
            and status.get("phase") == wanted
        ):
            return 0
        if time.monotonic() > deadline:
            raise PluginError(f"{target.agent_id} is not {wanted} after {timeout:.0f}s (it is {now})")
        time.sleep(0.5)


def _read_sessions(target: Target, name: str | None) -> list[dict[str, Any]]:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(target.cluster.api())
    where = f"{PLURAL}.{GROUP}{'/' + name if name else ''} in namespace {target.namespace}"
    try:
        if name:
            one: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, target.namespace, PLURAL, name
            )
            return [one]
        listed: dict[str, Any] = custom.list_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, target.namespace, PLURAL
        )
        return list(listed.get("items") or [])
    except ApiException as exc:
        if exc.status == 404:
            raise PluginError(f"no {where}") from exc
        raise PluginError(f"cannot read {where}: {exc.status} {exc.reason}") from exc


def run_get(target: Target, name: str | None) -> int:
    bodies = _read_sessions(target, name)
    if not bodies:
        print(f"No AgentSessions in namespace {target.namespace}.")
        return 0
    print(table(session_rows(bodies)))
    return 0


def run_status(target: Target, output: str) -> int:
    (body,) = _read_sessions(target, target.name)
    if output == "json":
        status = body.get("status") or {}
        print(json.dumps({"name": target.agent_id, "phase": status.get("phase"), "usage": status.get("usage"),
                          "budget": (body.get("spec") or {}).get("budget"),
                          "budgetExhausted": budget_exhausted(body)}, indent=2))  # fmt: skip
    else:
        print("\n".join(describe_session(body)))
    return 0
