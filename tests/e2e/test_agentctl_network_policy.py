"""The NetworkPolicy the operator keeps in front of agentctl (controller/network_policy.py), enforced on a node.

A real session pod made by the real operator (on the node, as in the other e2e tests, told the chart's policy
settings: the clients' namespace and labels), and probe pods (tests/support/netprobe.py) that try agentctl's port
from where an attacker would: the session's own namespace, the clients' namespace without the operator's or the
gateway's labels, and another namespace with the very labels the policy admits. Each is refused; pods with those
labels in the clients' namespace, and the node itself (where this operator runs), get through.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from tests.conftest import wait_until
from tests.support.kube import Sessions
from tests.support.netprobe import allowed, denied, from_node, start_probes, until_outcome
from tests.support.processes import OperatorProcess, operator_process

from agentsession.api.constants import LABEL_COMPONENT, LABEL_INSTANCE, LABEL_NAME
from agentsession.controller.config import AgentctlNetworkPolicy

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

# The module's own operator and namespaces: another run's operator serving the usual `t-*` ones would otherwise
# build these sessions' pods without the policy.
PREFIX = "agentctl-guard-"
POLICY = "agentctl"
RELEASE = {LABEL_NAME: "agentsession", LABEL_INSTANCE: "guard-test"}


@pytest.fixture(scope="module")
def namespaces(kube_api: Any) -> Iterator[dict[str, str]]:
    """The sessions', the clients' and a third namespace, Pod Security `restricted`, deleted after the module."""
    core = client.CoreV1Api(kube_api)
    suffix = uuid.uuid4().hex[:6]
    names = {role: f"{PREFIX}{role}-{suffix}" for role in ("sessions", "clients", "elsewhere")}
    for name in names.values():
        core.create_namespace(
            {"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
        )
        wait_until(f"the default service account of {name}",
                   lambda n=name: core.read_namespaced_service_account("default", n))  # type: ignore[misc]  # fmt: skip
    try:
        yield names
    finally:
        for name in names.values():
            core.delete_namespace(name)


@pytest.fixture(scope="module")
def guarding_operator(
    kubeconfig: str,
    crd_installed: list[str],
    project_image: str,
    namespaces: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    policy = AgentctlNetworkPolicy(name=POLICY, client_namespace=namespaces["clients"], client_labels=RELEASE)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with operator_process(
        kubeconfig,
        log,
        namespaces=json.dumps([f"{PREFIX}*"]),
        image=project_image,
        image_pull_policy="IfNotPresent",
        agentctl_network_policy=policy.model_dump_json(by_alias=True),
    ) as running:
        yield running


def test_only_the_operators_and_the_gateways_pods_and_the_node_reach_agentctl(
    guarding_operator: OperatorProcess, kube_api: Any, namespaces: dict[str, str], project_image: str
) -> None:
    sessions = Sessions(kube_api, namespaces["sessions"])
    sessions.create("guarded", {})
    # Ready means the operator, on the node, reached agentctl (it starts ACP through it) past the policy.
    wait_until("the session Ready", lambda: sessions.has_condition("guarded", "Ready", "True"), timeout=180)
    guard = client.NetworkingV1Api(kube_api).read_namespaced_network_policy(POLICY, namespaces["sessions"])
    assert guard.spec.policy_types == ["Ingress"]
    endpoint = urllib.parse.urlsplit(sessions.get("guarded")["status"]["agentctlEndpoint"])
    host, port = str(endpoint.hostname), int(endpoint.port or 0)

    clients, elsewhere = namespaces["clients"], namespaces["elsewhere"]
    gateway, operator, stranger, neighbour, impostor = start_probes(
        client.CoreV1Api(kube_api),
        project_image,
        (clients, "gateway", {**RELEASE, LABEL_COMPONENT: "gateway"}),
        (clients, "operator", {**RELEASE, LABEL_COMPONENT: "operator"}),
        (clients, "stranger", {**RELEASE, LABEL_COMPONENT: "console"}),
        (namespaces["sessions"], "neighbour", {}),
        (elsewhere, "impostor", {**RELEASE, LABEL_COMPONENT: "gateway"}),
    )
    print()
    for probe in (gateway, operator):
        outcome, took = until_outcome(f"{probe} reaching agentctl at {host}:{port}",
                                      lambda p=probe: p.connect(host, port), allowed)  # type: ignore[misc]  # fmt: skip
        print(f"{probe} -> agentctl {host}:{port}: {outcome} after {took:.3f}s")
    for probe in (stranger, neighbour, impostor):
        outcome, took = until_outcome(f"{probe} kept from agentctl at {host}:{port}",
                                      lambda p=probe: p.connect(host, port), denied)  # type: ignore[misc]  # fmt: skip
        print(f"{probe} -> agentctl {host}:{port}: {outcome} after {took:.3f}s")
    assert from_node(host, port) == "open"
    # The admitted pods still get through once every refusal is in force.
    assert [gateway.connect(host, port), operator.connect(host, port)] == ["open", "open"]
