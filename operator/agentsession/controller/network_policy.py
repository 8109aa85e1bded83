"""The NetworkPolicy that guards agentctl's port, and the session pods' way out, in each namespace where the
operator runs session pods.

A NetworkPolicy is per namespace, and in cluster scope the operator serves namespaces nobody listed, so the
operator keeps one wherever it creates a pod: created if absent, put back to the desired spec if someone changed
it. The desired policy selects every session pod of the namespace and admits, to agentctl's port only, the pods of
the operator and the gateway (their namespace and labels come from the chart). With an egress proxy, it also
lets those pods out to the release's proxy pods on the proxy's port and to DNS in kube-system, and nowhere else:
no ipBlock, so no address that is not one of those pods (the API server, a node, a link-local or metadata address,
the internet) is reachable (`policy_reach` proves it). A namespace is looked at again at most every
RECHECK_SECONDS, so a burst of pods costs one request.
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
from agentsession.controller.config import AgentctlNetworkPolicy, EgressProxy, OperatorConfig
from agentsession.kube.client import Kube
from agentsession.kube.errors import Conflict
from agentsession.kube.resources import NETWORK_POLICIES

log = logging.getLogger(__name__)
RECHECK_SECONDS: Final = 300.0
POLICY_COMPONENT: Final = "agentctl-ingress"
# The session pods' own labels (`pod_builder.labels`): what the policy selects.
SESSION_PODS: Final = {LABEL_NAME: "agentsession", LABEL_COMPONENT: "agent"}
CLIENT_COMPONENTS: Final = ("operator", "gateway")
EGRESS_PROXY_COMPONENT: Final = "egress-proxy"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
# Where the cluster's DNS runs; its pods' labels differ between distributions, its namespace does not.
DNS_NAMESPACE: Final = "kube-system"
DNS_PORT: Final = 53


def _release_pods(settings: AgentctlNetworkPolicy, components: tuple[str, ...]) -> list[Manifest]:
    """Selector terms of the release's pods of these components."""
    terms = [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in sorted(settings.client_labels.items())
    ]
    terms.append({"key": LABEL_COMPONENT, "operator": "In", "values": list(components)})
    return terms


def _egress(settings: AgentctlNetworkPolicy, proxy: EgressProxy) -> list[Manifest]:
    """The session pods' only ways out: the release's egress proxy, and DNS."""
    return [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: proxy.service_namespace}},
                    "podSelector": {"matchExpressions": _release_pods(settings, (EGRESS_PROXY_COMPONENT,))},
                }
            ],
            # The pods' port: a policy applies after the Service's address is translated to a pod's, so the
            # proxy's Service must serve on the port its pods listen on (the chart's does).
            "ports": [{"protocol": "TCP", "port": proxy.port}],
        },
        {
            "to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}}}],
            "ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}],
        },
    ]


def build_policy(
    namespace: str, settings: AgentctlNetworkPolicy, port: int, proxy: EgressProxy | None = None
) -> Manifest:
    """The namespace's policy; with `proxy`, one that restricts the session pods' egress as well."""
    spec: Manifest = {
        "podSelector": {"matchLabels": dict(SESSION_PODS)},
        "policyTypes": ["Ingress", "Egress"] if proxy is not None else ["Ingress"],
        "ingress": [
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {NAMESPACE_NAME_LABEL: settings.client_namespace}
                        },
                        "podSelector": {"matchExpressions": _release_pods(settings, CLIENT_COMPONENTS)},
                    }
                ],
                "ports": [{"protocol": "TCP", "port": port}],
            }
        ],
    }
    if proxy is not None:
        spec["egress"] = _egress(settings, proxy)
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
        "spec": spec,
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
        proxy: EgressProxy | None = None,
    ) -> None:
        self._kube = kube
        self._settings = settings
        self._port = port
        self._proxy = proxy
        self._clock = clock
        self._checked: dict[str, float] = {}

    async def ensure(self, namespace: str) -> None:
        """Before a session pod is created in `namespace`; a refusal (KubeError) means no pod yet."""
        checked = self._checked.get(namespace)
        if checked is not None and self._clock() - checked < RECHECK_SECONDS:
            return
        desired = build_policy(namespace, self._settings, self._port, self._proxy)
        try:
            await self._kube.create(desired)
            log.info("created NetworkPolicy %s/%s: agentctl admits the operator and the gateway only%s",
                     namespace, self._settings.name,
                     "; session pods reach only the egress proxy and DNS" if self._proxy else "")  # fmt: skip
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
        log.warning("NetworkPolicy %s/%s differed from the one that guards the session pods; put it back",
                    namespace, self._settings.name)  # fmt: skip


def policy_keeper(config: OperatorConfig, kube: Kube) -> PolicyKeeper | None:
    """The keeper of the configured policy; None when the operator keeps none."""
    settings = config.agentctl_network_policy
    if settings is None:
        return None
    return PolicyKeeper(kube, settings, config.agentctl_port, proxy=config.egress_proxy)
