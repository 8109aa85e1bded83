"""The operator with an egress proxy set, against a real API server: a session's pod never names its credentials
Secret, the namespace's NetworkPolicy (as the API server stores it) lets session pods out only to the proxy and
DNS, a session waits for the proxy's Service, and status.usage written past spec.budget turns BudgetExhausted,
which a raised budget turns back. Pods are pinned to no node: the API server's view is what is checked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from agentsession.api.constants import GROUP, PLURAL, VERSION
from agentsession.api.egress import PHANTOM_DIGEST_ANNOTATION, phantom_digest
from agentsession.controller.policy_reach import Destination, PodAt, egress_allowed
from tests.conftest import wait_until
from tests.integration.conftest import fresh_namespace
from tests.support.kube import NOWHERE, Sessions
from tests.support.pod_security import secret_references
from tests.support.processes import OperatorProcess, operator_process

pytestmark = pytest.mark.cluster

SERVICE = "egress-proxy"
PROXY_PORT = 8080
POLICY = "agentsession-agentctl"
RELEASE_LABELS = {"app.kubernetes.io/name": "agentsession", "app.kubernetes.io/instance": "egress-test"}
SECRET = "model-keys"


def _service(namespace: str) -> dict[str, Any]:
    return {
        "metadata": {"name": SERVICE, "namespace": namespace},
        "spec": {
            "selector": {**RELEASE_LABELS, "app.kubernetes.io/component": "egress-proxy"},
            "ports": [{"name": "proxy", "port": PROXY_PORT, "targetPort": PROXY_PORT}],
        },
    }


@pytest.fixture(scope="module")
def proxy_namespace(kube_api: Any, namespace_prefix: str) -> Iterator[str]:
    # Outside the operator's namespaces: the release's, where the proxy's Service lives.
    yield from fresh_namespace(kube_api, f"{namespace_prefix}x")


@pytest.fixture(scope="module")
def proxy_address(kube_api: Any, proxy_namespace: str) -> str:
    created = client.CoreV1Api(kube_api).create_namespaced_service(proxy_namespace, _service(proxy_namespace))
    return str(created.spec.cluster_ip)


@pytest.fixture(scope="module")
def operator(
    kubeconfig: str,
    crd_installed: list[str],
    operator_namespaces: str,
    proxy_namespace: str,
    proxy_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    settings = {
        "egress_proxy": json.dumps(
            {"serviceNamespace": proxy_namespace, "serviceName": SERVICE, "port": PROXY_PORT,
             "gitHosts": ["github.com"]}
        ),
        "agentctl_network_policy": json.dumps(
            {"name": POLICY, "clientNamespace": proxy_namespace, "clientLabels": RELEASE_LABELS}
        ),
        "default_budget": json.dumps({"maxCostUSD": "100"}),
    }  # fmt: skip
    with operator_process(kubeconfig, log, namespaces=operator_namespaces, **settings) as running:
        yield running


def _env(container: Any) -> dict[str, str]:
    return {var.name: var.value or "" for var in container.env or []}


def _write_usage(kube_api: Any, namespace: str, name: str, **usage: Any) -> None:
    """What the egress proxy writes: a merge patch of status.usage."""
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": {"usage": usage}}
    )


def test_the_pod_never_names_the_credentials_secret_and_its_policy_lets_it_reach_only_the_proxy(
    operator: OperatorProcess, sessions: Sessions, kube_api: Any, proxy_address: str, proxy_namespace: str
) -> None:
    spec = {
        "agent": {"type": "claude-code", "credentialsSecretRef": {"name": SECRET}},
        "workspace": {"repository": {"url": "https://github.com/example/repo.git"}},
        "podTemplate": {"nodeSelector": NOWHERE},
    }
    sessions.create("keyless", spec)
    pod = wait_until("the session's pod", lambda: sessions.pod("keyless"), timeout=30)
    body = client.ApiClient().sanitize_for_serialization(pod)
    assert secret_references(body, SECRET) == []
    assert all(not c.get("envFrom") for c in body["spec"]["initContainers"] + body["spec"]["containers"])
    agent = next(c for c in pod.spec.containers if c.name == "agent")
    variables = _env(agent)
    phantom = variables["ANTHROPIC_API_KEY"]
    assert phantom.startswith("agsp1_")
    assert pod.metadata.annotations[PHANTOM_DIGEST_ANNOTATION] == phantom_digest(phantom)
    url = f"http://{proxy_address}:{PROXY_PORT}"
    assert variables["ANTHROPIC_BASE_URL"] == f"{url}/v1/model/anthropic"
    assert variables["HTTPS_PROXY"] == url
    clone = next(c for c in pod.spec.init_containers if c.name == "clone")
    assert _env(clone)["GIT_CONFIG_KEY_0"] == f"url.{url}/v1/git/github.com/.insteadOf"

    # The policy as the API server keeps it (validated, defaulted), read by the rules of the API.
    stored = client.NetworkingV1Api(kube_api).read_namespaced_network_policy(POLICY, sessions.namespace)
    policy = client.ApiClient().sanitize_for_serialization(stored)
    labels = pod.metadata.labels
    proxy_pod = PodAt(
        proxy_namespace,
        {**RELEASE_LABELS, "app.kubernetes.io/component": "egress-proxy"},
        {"kubernetes.io/metadata.name": proxy_namespace},
    )
    assert egress_allowed(policy, labels, Destination("10.0.0.5", PROXY_PORT, pod=proxy_pod))
    for address, port in (("169.254.169.254", 80), (proxy_address, PROXY_PORT), ("10.96.0.1", 443)):
        assert not egress_allowed(policy, labels, Destination(address, port)), address


def test_usage_past_the_budget_turns_the_condition_and_a_raised_budget_turns_it_back(
    operator: OperatorProcess, sessions: Sessions, kube_api: Any
) -> None:
    sessions.create("spender", {"budget": {"maxRequests": 3}, "podTemplate": {"nodeSelector": NOWHERE}})
    within = wait_until(
        "BudgetExhausted=False",
        lambda: sessions.has_condition("spender", "BudgetExhausted", "False", "WithinBudget"),
        timeout=30,
    )
    assert within["message"] == "within the budget (maxCostUSD $100, maxRequests 3)"
    _write_usage(kube_api, sessions.namespace, "spender", requests=3, inputTokens=10, costUSD="0.01")
    spent = wait_until(
        "BudgetExhausted=True",
        lambda: sessions.has_condition("spender", "BudgetExhausted", "True", "BudgetExhausted"),
        timeout=30,
    )
    assert spent["message"] == "3 model requests reached the budget of 3"
    wait_until("the Warning Event", lambda: sessions.has_events("spender", "BudgetExhausted"), timeout=30)
    warning = next(e for e in sessions.events("spender") if e.reason == "BudgetExhausted")
    assert warning.type == "Warning"
    assert "reached the budget of 3" in warning.message
    # The operator's status writes leave the proxy's usage alone.
    assert sessions.get("spender")["status"]["usage"]["requests"] == 3

    sessions.patch_spec("spender", {"budget": {"maxRequests": 10}})
    wait_until(
        "BudgetExhausted=False again",
        lambda: sessions.has_condition("spender", "BudgetExhausted", "False", "WithinBudget"),
        timeout=30,
    )
    wait_until("the BudgetRaised Event", lambda: sessions.has_events("spender", "BudgetRaised"), timeout=30)
    assert sessions.get("spender")["status"]["usage"]["inputTokens"] == 10


def test_without_the_proxys_service_the_session_waits_and_says_why(
    operator: OperatorProcess, sessions: Sessions, kube_api: Any, proxy_namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.delete_namespaced_service(SERVICE, proxy_namespace)
    try:
        sessions.create("waiting", {"podTemplate": {"nodeSelector": NOWHERE}})
        ready = wait_until(
            "Ready=False/EgressProxyUnavailable",
            lambda: sessions.has_condition("waiting", "Ready", "False", "EgressProxyUnavailable"),
            timeout=30,
        )
        assert f"{proxy_namespace}/{SERVICE}" in ready["message"]
        wait_until(
            "the Warning", lambda: sessions.has_events("waiting", "EgressProxyUnavailable"), timeout=30
        )
        pods = core.list_namespaced_pod(sessions.namespace).items
        assert [p.metadata.name for p in pods] == []
    finally:
        created = core.create_namespaced_service(proxy_namespace, _service(proxy_namespace))
    # The Service is back, at a new address: the waiting session's pod is made for it, well before the 30 s
    # recheck (the Service's watch brings the reconcile).
    pod = wait_until("the pod once the Service exists", lambda: sessions.pod("waiting"), timeout=15)
    assert _env(pod.spec.containers[0])["HTTPS_PROXY"] == f"http://{created.spec.cluster_ip}:{PROXY_PORT}"
