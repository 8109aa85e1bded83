"""The NetworkPolicy that guards agentctl's port in each namespace where the operator runs session pods.

A NetworkPolicy is per namespace, and in cluster scope the operator serves namespaces nobody listed, so the
operator keeps one wherever it creates a pod: created if absent, put back to the desired spec if someone changed
it. The desired policy selects every session pod of the namespace and admits, to agentctl's port only, the pods of
the operator and the gateway (their namespace and labels come from the chart). A namespace is looked at again at
most every RECHECK_SECONDS, so a burst of pods costs one request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from agentsession.api.constants import (
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    MANAGER,
)
from agentsession.api.manifest import Manifest
from agentsession.controller.config import AgentctlNetworkPolicy, OperatorConfig
from agentsession.kube.client import Kube
from agentsession.kube.errors import Conflict
from agentsession.kube.resources import NETWORK_POLICIES

log = logging.getLogger(__name__)
RECHECK_SECONDS: Final = 300.0
POLICY_COMPONENT: Final = "agentctl-ingress"
# The session pods' own labels (`pod_builder.labels`): what the policy selects.
SESSION_PODS: Final = {LABEL_NAME: "agentsession", LABEL_COMPONENT: "agent"}
CLIENT_COMPONENTS: Final = ("operator", "gateway")


def build_policy(namespace: str, settings: AgentctlNetworkPolicy, port: int) -> Manifest:
    clients = [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in sorted(settings.client_labels.items())
    ]
    clients.append({"key": LABEL_COMPONENT, "operator": "In", "values": list(CLIENT_COMPONENTS)})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": settings.name,
            "namespace": namespace,
            "labels": {
                LABEL_NAME: "agentsession",
                LABEL_COMPONENT: POLICY_COMPONENT,
                LABEL_PART_OF: "agentsession",
                LABEL_MANAGED_BY: MANAGER,
            },
        },
        "spec": {
            "podSelector": {"matchLabels": dict(SESSION_PODS)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": settings.client_namespace}
                            },
                            "podSelector": {"matchExpressions": clients},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": port}],
                }
            ],
        },
    }


def merge_patch_to(current: Any, desired: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns `current` into `desired`: keys `current` has beyond `desired` are
    nulled, lists replaced whole. None when they are equal already."""
    if current == desired:
        return None
    if not isinstance(current, dict) or not isinstance(desired, dict):
        return desired
    patch: dict[str, Any] = {key: None for key in current if key not in desired}
    for key, value in desired.items():
        if key not in current:
            patch[key] = value
        elif (inner := merge_patch_to(current[key], value)) is not None:
            patch[key] = inner
    return patch


class PolicyKeeper:
    """Keeps the desired policy in the namespaces it is asked about; each at most once per RECHECK_SECONDS."""

    def __init__(
        self,
        kube: Kube,
        settings: AgentctlNetworkPolicy,
        port: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._settings = settings
        self._port = port
        self._clock = clock
        self._checked: dict[str, float] = {}

    async def ensure(self, namespace: str) -> None:
        """Before a session pod is created in `namespace`; a refusal (KubeError) means no pod yet."""
        checked = self._checked.get(namespace)
        if checked is not None and self._clock() - checked < RECHECK_SECONDS:
            return
        desired = build_policy(namespace, self._settings, self._port)
        try:
            await self._kube.create(desired)
            log.info("created NetworkPolicy %s/%s: agentctl admits the operator and the gateway only",
                     namespace, self._settings.name)  # fmt: skip
        except Conflict as error:
            if not error.already_exists:
                raise
            await self._restore(namespace, desired)
        self._checked[namespace] = self._clock()

    async def _restore(self, namespace: str, desired: Manifest) -> None:
        current = await self._kube.get(NETWORK_POLICIES, namespace, self._settings.name)
        ours = {
            "labels": (current.get("metadata") or {}).get("labels") or {},
            "spec": current.get("spec") or {},
        }
        wanted = {"labels": {**ours["labels"], **desired["metadata"]["labels"]}, "spec": desired["spec"]}
        patch = merge_patch_to(ours, wanted)
        if patch is None:
            return
        body: Manifest = {"spec": patch["spec"]} if "spec" in patch else {}
        if "labels" in patch:
            body["metadata"] = {"labels": patch["labels"]}
        await self._kube.patch(NETWORK_POLICIES, namespace, self._settings.name, body)
        log.warning("NetworkPolicy %s/%s differed from the one that guards agentctl; put it back",
                    namespace, self._settings.name)  # fmt: skip


def policy_keeper(config: OperatorConfig, kube: Kube) -> PolicyKeeper | None:
    """The keeper of the configured policy; None when the operator keeps none."""
    settings = config.agentctl_network_policy
    return PolicyKeeper(kube, settings, config.agentctl_port) if settings is not None else None
