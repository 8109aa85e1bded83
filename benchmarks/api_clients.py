"""What the API server serves, and to whom: its counters read from /metrics, and identities that make a
component's requests countable apart from every other client of a shared cluster.

The API server counts requests by verb and resource (`apiserver_request_total`) but not by client. It does count
them by FlowSchema (`apiserver_flowcontrol_dispatched_requests_total`), so a component that runs under its own
ServiceAccount, matched by a FlowSchema of its own, has its requests counted exactly. `chart_identities` makes
those from the chart itself (its namespace-scoped RBAC), so a benchmark's operator also proves that the chart's
rules are enough.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.startup_bench import kubectl

CHART = Path(__file__).resolve().parent.parent / "charts" / "agentsession"
RELEASE = "scale"
# The kinds a session's life touches; the API server's other rows are other clients' business.
SESSION_RESOURCES = {"agentsessions", "pods", "secrets", "events", "persistentvolumeclaims"}

RequestKey = tuple[str, str, str]  # verb, resource, subresource


@dataclass(frozen=True)
class ApiServerCounters:
    requests: Counter[RequestKey]  # of SESSION_RESOURCES, summed over codes and scopes
    by_flow: Counter[str]  # every request, by FlowSchema
    watches: Counter[str]  # WATCH requests open now, of SESSION_RESOURCES

    @staticmethod
    def read() -> ApiServerCounters:
        requests: Counter[RequestKey] = Counter()
        by_flow: Counter[str] = Counter()
        watches: Counter[str] = Counter()
        for family in text_string_to_metric_families(kubectl("get", "--raw", "/metrics")):
            for sample in family.samples:
                labels = sample.labels
                if sample.name == "apiserver_request_total" and labels.get("resource") in SESSION_RESOURCES:
                    requests[(labels["verb"], labels["resource"], labels.get("subresource", ""))] += int(
                        sample.value
                    )
                elif sample.name == "apiserver_flowcontrol_dispatched_requests_total":
                    by_flow[labels["flow_schema"]] += int(sample.value)
                elif (
                    sample.name == "apiserver_longrunning_requests"
                    and labels.get("verb") == "WATCH"
                    and labels.get("resource") in SESSION_RESOURCES
                ):
                    watches[labels["resource"]] += int(sample.value)
        return ApiServerCounters(requests, by_flow, watches)


def flow_schema_name(namespace: str, component: str) -> str:
    return f"{namespace}-{component}"


def _flow_schema(namespace: str, component: str, account: str) -> dict[str, Any]:
    """Every request of the ServiceAccount, to the exempt priority level (where the admin's requests go): the
    component is counted apart, and throttled no more than it would be otherwise."""
    everything = {
        "verbs": ["*"],
        "apiGroups": ["*"],
        "resources": ["*"],
        "namespaces": ["*"],
        "clusterScope": True,
    }
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": flow_schema_name(namespace, component)},
        "spec": {
            "priorityLevelConfiguration": {"name": "exempt"},
            "matchingPrecedence": 50,
            "rules": [
                {
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {"name": account, "namespace": namespace},
                        }
                    ],
                    "resourceRules": [everything],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }


def _chart_rbac(namespace: str) -> list[dict[str, Any]]:
    """The chart's ServiceAccounts, Roles and RoleBindings with rbac.scope=namespace, serving `namespace`."""
    rendered = subprocess.run(
        ["helm", "template", RELEASE, str(CHART), "--namespace", namespace, "--set", "rbac.scope=namespace",
         "--set", f"watchNamespaces={{{namespace}}}",
         "-s", "templates/rbac.yaml", "-s", "templates/serviceaccounts.yaml"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    kinds = ("ServiceAccount", "Role", "RoleBinding")
    return [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] in kinds]


def _kubeconfig(admin_kubeconfig: Path, account: str, token: str, namespace: str) -> dict[str, Any]:
    """The admin kubeconfig's cluster, with the account's token as the user."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": account,
        "clusters": [{"name": account, "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [
            {"name": account, "context": {"cluster": account, "user": account, "namespace": namespace}}
        ],
    }


def chart_identities(namespace: str, workdir: Path) -> dict[str, Path]:
    """The operator and the gateway as the chart makes them, each with a FlowSchema of its own
    (`flow_schema_name`; cluster-scoped: delete them with `delete_flow_schemas`). Returns a kubeconfig per
    component ("operator", "gateway"), with a token of its ServiceAccount."""
    objects = _chart_rbac(namespace)
    prefix = f"{RELEASE}-agentsession-"
    accounts = {
        o["metadata"]["name"].removeprefix(prefix): o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ServiceAccount"
    }
    objects += [_flow_schema(namespace, component, account) for component, account in accounts.items()]
    manifest = workdir / "identities.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    kubectl("apply", "-f", str(manifest))
    admin = Path(os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config")
    kubeconfigs = {}
    for component, account in accounts.items():
        token = kubectl("create", "token", account, "-n", namespace, "--duration", "6h").strip()
        path = workdir / f"{component}.kubeconfig"
        path.touch(mode=0o600)
        path.write_text(json.dumps(_kubeconfig(admin, account, token, namespace)))
        kubeconfigs[component] = path
    return kubeconfigs


def delete_flow_schemas(namespace: str) -> None:
    names = [flow_schema_name(namespace, component) for component in ("operator", "gateway")]
    kubectl("delete", "flowschema", *names, "--ignore-not-found")
