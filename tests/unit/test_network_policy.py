"""The agentctl NetworkPolicy the operator keeps wherever it runs session pods: its shape, and how it is kept."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsession.controller.config import AgentctlNetworkPolicy
from agentsession.controller.network_policy import (
    RECHECK_SECONDS,
    PolicyKeeper,
    build_policy,
    merge_patch_to,
)
from agentsession.kube.resources import NETWORK_POLICIES
from agentsession.testing.fake_kube import FakeKube, merge_patch
from tests.unit.test_pool import PoolWorld
from tests.unit.test_reconciler import NS, POD, World

SETTINGS = AgentctlNetworkPolicy(
    name="agentsession-agentctl",
    client_namespace="agentsession-system",
    client_labels={"app.kubernetes.io/name": "agentsession", "app.kubernetes.io/instance": "prod"},
)
CONFIG = {"agentctl_network_policy": SETTINGS.model_dump(by_alias=True)}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_policy_admits_only_the_operator_and_the_gateway_to_agentctls_port() -> None:
    policy = build_policy("team-a", SETTINGS, 9999)
    assert policy["metadata"]["namespace"] == "team-a"
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "agentsession-operator"
    spec = policy["spec"]
    assert spec["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "agentsession", "app.kubernetes.io/component": "agent"}
    }
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9999}]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "agentsession-system"}
    }
    expressions = {e["key"]: e["values"] for e in peer["podSelector"]["matchExpressions"]}
    assert expressions == {
        "app.kubernetes.io/name": ["agentsession"],
        "app.kubernetes.io/instance": ["prod"],
        "app.kubernetes.io/component": ["operator", "gateway"],
    }


@pytest.mark.parametrize(
    ("current", "desired"),
    [
        ({"a": 1}, {"a": 1}),
        ({"a": 1, "b": 2}, {"a": 1}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}),
        ({"a": [1, 2]}, {"a": [2]}),
        ({}, {"a": {"b": [1]}}),
        ({"a": {"b": 1}}, {"a": 3}),
    ],
)
def test_the_merge_patch_turns_current_into_desired(current: dict[str, Any], desired: dict[str, Any]) -> None:
    patch = merge_patch_to(current, desired)
    if current == desired:
        assert patch is None
    else:
        assert merge_patch(copy.deepcopy(current), patch) == desired


async def test_the_keeper_creates_once_and_looks_again_only_after_a_while() -> None:
    kube, clock = FakeKube(), Clock()
    keeper = PolicyKeeper(kube, SETTINGS, 9999, clock)
    await keeper.ensure("team-a")
    await keeper.ensure("team-a")
    assert kube.verbs("NetworkPolicy") == ["create NetworkPolicy agentsession-agentctl"]
    clock.now += RECHECK_SECONDS
    await keeper.ensure("team-a")
    # Present and as desired: read, not written.
    assert kube.verbs("NetworkPolicy")[1:] == [
        "create NetworkPolicy agentsession-agentctl",
        "get NetworkPolicy agentsession-agentctl",
    ]


async def test_a_policy_changed_by_someone_is_put_back_and_keeps_their_labels() -> None:
    kube, clock = FakeKube(), Clock()
    desired = build_policy("team-a", SETTINGS, 9999)
    changed = copy.deepcopy(desired)
    changed["metadata"]["labels"]["team"] = "a"
    changed["spec"]["podSelector"]["matchLabels"]["extra"] = "x"
    changed["spec"]["ingress"][0]["from"] = [{}]
    changed["spec"]["egress"] = [{}]
    kube.put(changed)
    await PolicyKeeper(kube, SETTINGS, 9999, clock).ensure("team-a")
    kept = kube.find("NetworkPolicy", "team-a", SETTINGS.name)
    assert kept is not None
    assert kept["spec"] == desired["spec"]
    assert kept["metadata"]["labels"] == {**desired["metadata"]["labels"], "team": "a"}


async def test_the_operator_puts_the_policy_in_place_before_the_first_pod() -> None:
    world = World(**CONFIG)
    await world.apply()
    await world.reconcile()
    verbs = world.kube.verbs()
    assert verbs.index("create NetworkPolicy agentsession-agentctl") < verbs.index(f"create Pod {POD}")
    assert world.kube.find("NetworkPolicy", NS, SETTINGS.name) is not None


async def test_a_refused_policy_means_no_pod_and_a_reason_the_user_sees() -> None:
    world = World(**CONFIG)
    world.kube.refuse("create", "NetworkPolicy", 403, "networkpolicies is forbidden: no RBAC")
    await world.apply()
    await world.reconcile()
    assert world.kube.find("Pod", NS, POD) is None, "no agentctl without its guard"
    assert world.reasons()["Ready"] == "Forbidden"
    ready = next(c for c in world.status()["conditions"] if c["type"] == "Ready")
    assert "NetworkPolicy that guards agentctl" in ready["message"]


async def test_a_pool_guards_its_namespace_before_its_warm_pods() -> None:
    world = PoolWorld(**CONFIG)
    await world.make_pool(replicas=1)
    verbs = world.kube.verbs()
    first_pod = next(v for v in verbs if v.startswith("create Pod"))
    assert verbs.index("create NetworkPolicy agentsession-agentctl") < verbs.index(first_pod)
    assert world.kube.find(NETWORK_POLICIES.kind, NS, SETTINGS.name) is not None


async def test_without_the_setting_no_policy_is_made() -> None:
    world = World()
    await world.apply()
    await world.reconcile()
    assert world.kube.verbs("NetworkPolicy") == []
