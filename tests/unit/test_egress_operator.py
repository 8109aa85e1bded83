"""The operator's side of the egress proxy and of budgets: the pod an agent gets with a proxy (a phantom key, the
proxy's routes, no credentials Secret anywhere), a session that waits for the proxy's Service, the condition
BudgetExhausted and its Events, the cancel of the running turn, and the triggers that bring those reconciles."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentsession.api.egress import (
    BUDGET_ANNOTATION,
    PHANTOM_DIGEST_ANNOTATION,
    Budget,
    new_phantom,
    phantom_digest,
)
from agentsession.api.models import AgentSessionSpec
from agentsession.api.session_ref import SessionRef
from agentsession.controller.config import EgressProxy, OperatorConfig
from agentsession.controller.egress_address import ProxyAddress, cluster_ip
from agentsession.controller.namespaces import TTL_SECONDS, NamespaceAnnotations
from agentsession.controller.pod_builder import (
    SPEC_HASH_ANNOTATION,
    EgressProxyUnavailable,
    EgressRoute,
    build_pod,
    shape_hash,
)
from agentsession.controller.reconciler import Reconciler
from agentsession.controller.triggers import budget_turned
from agentsession.kube.resources import NAMESPACES, SERVICES
from agentsession.testing.fake_kube import FakeKube
from tests.support.pod_security import restricted_violations, secret_references
from tests.unit.test_pool import POOL, PoolWorld
from tests.unit.test_reconciler import NAME, NS, World

PROXY = EgressProxy(
    service_namespace="agentsession-system",
    service_name="prod-egress-proxy",
    port=8080,
    git_hosts=["github.com", "git.example"],
)
CONFIG = OperatorConfig(image="agentsession:test", egress_proxy=PROXY)
ADDRESS = "10.96.7.7"
PROXY_URL = f"http://{ADDRESS}:8080"
SESSION = SessionRef(namespace="team-a", name="fix-bug", uid="1234-uid", generation=3)
SECRET = "model-keys"


def route(phantom: str | None = None, address: str = ADDRESS) -> EgressRoute:
    return EgressRoute(address, PROXY.port, tuple(PROXY.git_hosts), phantom or new_phantom())


def pod_for(
    spec: dict[str, Any], egress: EgressRoute | None, config: OperatorConfig = CONFIG
) -> dict[str, Any]:
    return build_pod(SESSION, AgentSessionSpec.model_validate(spec), config, egress)


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"] if c["name"] == name)


def env(c: dict[str, Any]) -> dict[str, str]:
    return {var["name"]: var.get("value", "") for var in c.get("env") or []}


def agent_spec(kind: str, **agent: Any) -> dict[str, Any]:
    return {
        "agent": {"type": kind, "credentialsSecretRef": {"name": SECRET}, **agent},
        "workspace": {"repository": {"url": "https://github.com/example/repo.git"}},
    }


PROXY_VARIABLES = {
    "HTTPS_PROXY": PROXY_URL,
    "HTTP_PROXY": PROXY_URL,
    "https_proxy": PROXY_URL,
    "http_proxy": PROXY_URL,
    "NO_PROXY": f"{ADDRESS},localhost,127.0.0.1",
    "no_proxy": f"{ADDRESS},localhost,127.0.0.1",
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": f"url.{PROXY_URL}/v1/git/github.com/.insteadOf",
    "GIT_CONFIG_VALUE_0": "https://github.com/",
    "GIT_CONFIG_KEY_1": f"url.{PROXY_URL}/v1/git/git.example/.insteadOf",
    "GIT_CONFIG_VALUE_1": "https://git.example/",
}


# --- the pod ---


@pytest.mark.parametrize(
    ("kind", "key_env", "base_url_env", "provider"),
    [
        ("claude-code", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "anthropic"),
        ("gemini", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "gemini"),
    ],
)
def test_the_agent_holds_a_phantom_and_calls_the_proxy(
    kind: str, key_env: str, base_url_env: str, provider: str
) -> None:
    phantom = new_phantom()
    pod = pod_for(
        agent_spec(kind, model={"baseURL": "https://llm.example/v1", "name": "m-1"}), route(phantom)
    )
    agent = container(pod, "agent")
    variables = env(agent)
    assert variables[key_env] == phantom
    assert variables[base_url_env] == f"{PROXY_URL}/v1/model/{provider}"
    assert variables[{"claude-code": "ANTHROPIC_MODEL", "gemini": "GEMINI_MODEL"}[kind]] == "m-1"
    assert {k: variables.get(k) for k in PROXY_VARIABLES} == PROXY_VARIABLES
    # The proxy forwards to spec.agent.model.baseURL; the agent is never told it.
    assert "llm.example" not in json.dumps(pod)
    assert pod["metadata"]["annotations"][PHANTOM_DIGEST_ANNOTATION] == phantom_digest(phantom)


def test_codex_is_pointed_at_the_proxy_through_its_provider_arguments() -> None:
    phantom = new_phantom()
    pod = pod_for(agent_spec("codex"), route(phantom))
    agent = container(pod, "agent")
    assert env(agent)["OPENAI_API_KEY"] == phantom
    argv = agent["command"]
    assert f'model_providers.agentsession.base_url="{PROXY_URL}/v1/model/openai"' in argv
    assert 'model_providers.agentsession.env_key="OPENAI_API_KEY"' in argv
    assert 'model_provider="agentsession"' in argv


@pytest.mark.parametrize("kind", ["claude-code", "codex", "gemini", "demo"])
def test_no_container_of_the_pod_reads_the_credentials_secret(kind: str) -> None:
    pod = pod_for(agent_spec(kind), route())
    assert secret_references(pod, SECRET) == []
    assert all("envFrom" not in c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"])
    assert restricted_violations(pod) == []
    # Without a proxy the Secret is the agent's env, as before.
    plain = pod_for(agent_spec(kind), None, OperatorConfig(image="agentsession:test"))
    assert secret_references(plain, SECRET) == [".spec.containers[0].envFrom[0].secretRef"]


def test_an_agent_without_a_provider_still_leaves_through_the_proxy() -> None:
    spec = {"agent": {"type": "custom", "image": "example/agent:1", "command": ["agent"],
                      "credentialsSecretRef": {"name": SECRET}}}  # fmt: skip
    phantom = new_phantom()
    variables = env(container(pod_for(spec, route(phantom)), "agent"))
    assert {k: variables.get(k) for k in PROXY_VARIABLES} == PROXY_VARIABLES
    assert phantom not in variables.values()
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        assert key not in variables


def test_the_clone_and_the_terminal_go_through_the_proxy_too() -> None:
    pod = pod_for(agent_spec("claude-code"), route())
    for name in ("clone", "agentctl"):
        variables = env(container(pod, name))
        assert {k: variables.get(k) for k in PROXY_VARIABLES} == PROXY_VARIABLES, name
        assert "ANTHROPIC_API_KEY" not in variables, name
    # The clone's URL stays https://: git's insteadOf sends it to the proxy's git route, which adds the token.
    assert "https://github.com/example/repo.git" in container(pod, "clone")["command"][2]


def test_a_users_own_secret_reaches_the_agent_as_asked() -> None:
    spec = agent_spec("claude-code", envFrom=[{"secretRef": {"name": "mine"}}])
    pod = pod_for(spec, route())
    assert secret_references(pod, "mine") == [".spec.containers[0].envFrom[0].secretRef"]
    assert secret_references(pod, SECRET) == []


def test_the_pod_hashes_ignore_the_phantom_but_not_the_address() -> None:
    spec = agent_spec("claude-code")
    first, second = pod_for(spec, route()), pod_for(spec, route())
    assert (
        env(container(first, "agent"))["ANTHROPIC_API_KEY"]
        != env(container(second, "agent"))["ANTHROPIC_API_KEY"]
    )
    assert (
        first["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        == (second["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
    )
    assert shape_hash(first) == shape_hash(second)
    moved = pod_for(spec, route(address="10.96.8.8"))
    assert shape_hash(moved) != shape_hash(first)
    assert (
        moved["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        != (first["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
    )


def test_a_users_variable_that_happens_to_change_still_changes_the_hash() -> None:
    phantom = new_phantom()
    one = pod_for({**agent_spec("claude-code", env=[{"name": "X", "value": "1"}])}, route(phantom))
    two = pod_for({**agent_spec("claude-code", env=[{"name": "X", "value": "2"}])}, route(phantom))
    assert shape_hash(one) != shape_hash(two)


def test_no_pod_is_built_without_the_proxys_address() -> None:
    with pytest.raises(EgressProxyUnavailable, match="prod-egress-proxy does not exist"):
        pod_for(agent_spec("claude-code"), None)


def test_an_ipv6_address_is_bracketed() -> None:
    assert route(address="fd00::7").model_url("anthropic") == "http://[fd00::7]:8080/v1/model/anthropic"


# --- the reconciler ---


class EgressWorld(World):
    """A World whose operator sends pods through the proxy at `address` (None: its Service is missing)."""

    def __init__(self, **config: Any) -> None:
        self.address: str | None = ADDRESS
        super().__init__(egress_proxy=PROXY.model_dump(by_alias=True), **config)

    def restart_operator(self) -> None:
        self.reconciler = Reconciler(
            self.config,
            self.kube,
            self.agentctls,
            self.pods_labelled,
            lambda namespace, stem: f"token-of-{namespace}-{stem}",
            clock=self.clock,
            proxy_address=lambda: self.address,
        )

    def namespace(self, **annotations: str) -> None:
        self.kube.put({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": NS, "annotations": annotations}})  # fmt: skip

    def write_usage(self, **usage: Any) -> None:
        """What the egress proxy writes: status.usage, nothing else."""
        session = self.session()
        session.setdefault("status", {})["usage"] = {**session["status"].get("usage", {}), **usage}
        self.kube.put(session)


async def test_a_session_with_a_credentials_secret_gets_a_pod_that_never_names_it() -> None:
    world = EgressWorld()
    await world.apply(agent={"type": "claude-code", "credentialsSecretRef": {"name": SECRET}})
    await world.reconcile()
    pod = world.kubelet.pod()
    assert secret_references(pod, SECRET) == []
    phantom = env(container(pod, "agent"))["ANTHROPIC_API_KEY"]
    assert pod["metadata"]["annotations"][PHANTOM_DIGEST_ANNOTATION] == phantom_digest(phantom)
    # Later reconciles (each with a phantom of its own) keep the pod: it is not outdated.
    world.kubelet.run()
    for _ in range(3):
        await world.reconcile()
    assert world.status()["phase"] == "Ready"
    assert world.kubelet.pod()["metadata"]["uid"] == pod["metadata"]["uid"]
    assert "PodSpecChanged" not in world.event_reasons()


async def test_without_the_proxys_service_no_pod_is_made_and_the_session_says_why() -> None:
    world = EgressWorld()
    world.address = None
    await world.apply(agent={"type": "claude-code", "credentialsSecretRef": {"name": SECRET}})
    requeue = await world.reconcile()
    assert world.kube.of_kind("Pod") == []
    assert world.status()["phase"] == "Pending"
    ready = world.condition("Ready")
    assert ready is not None
    assert ready["reason"] == "EgressProxyUnavailable"
    assert "egressProxy.enabled" in ready["message"]
    assert ("Warning", "EgressProxyUnavailable") in world.events()
    assert requeue is not None
    # The Service appears (its watch triggers the reconcile): the pod is made.
    world.address = ADDRESS
    await world.reconcile()
    assert secret_references(world.kubelet.pod(), SECRET) == []
    assert world.reasons()["Ready"] != "EgressProxyUnavailable"


async def test_a_pool_member_keeps_its_phantom_when_a_session_claims_it() -> None:
    world = PoolWorld(egress_proxy=PROXY.model_dump(by_alias=True))
    world.pools = type(world.pools)(
        world.config, world.kube, world.pods_labelled, lambda namespace, stem: f"token-of-{namespace}-{stem}",
        proxy_address=lambda: ADDRESS,
    )  # fmt: skip
    world.reconciler = Reconciler(
        world.config, world.kube, world.agentctls, world.pods_labelled,
        lambda namespace, stem: f"token-of-{namespace}-{stem}", clock=world.clock, proxy_address=lambda: ADDRESS,
    )  # fmt: skip
    await world.make_pool(replicas=1)
    world.ready_all()
    (member,) = world.members()
    digest = member["metadata"]["annotations"][PHANTOM_DIGEST_ANNOTATION]
    await world.apply(poolRef={"name": POOL})
    await world.reconcile()
    claimed = world.kube.find("Pod", NS, member["metadata"]["name"])
    assert claimed is not None
    assert claimed["metadata"]["labels"]["agentsession.dev/name"] == NAME
    assert claimed["metadata"]["annotations"][PHANTOM_DIGEST_ANNOTATION] == digest
    assert world.status()["startup"]["source"] == "Claimed"


# --- budgets ---


async def test_usage_past_the_budget_turns_the_condition_posts_a_warning_and_cancels_the_turn() -> None:
    world = EgressWorld()
    await world.until_ready(budget={"maxTokens": 1000})
    budget = world.condition("BudgetExhausted")
    assert budget is not None
    assert (budget["status"], budget["reason"]) == ("False", "WithinBudget")
    assert "maxTokens 1000" in budget["message"]
    world.write_usage(inputTokens=600, outputTokens=300, cachedTokens=100, requests=3, costUSD="0.02")
    requeue = await world.reconcile()
    budget = world.condition("BudgetExhausted")
    assert budget is not None
    assert (budget["status"], budget["reason"]) == ("True", "BudgetExhausted")
    assert budget["message"] == "1000 tokens reached the budget of 1000"
    assert ("Warning", "BudgetExhausted") in world.events()
    assert any("1000 tokens reached the budget of 1000" in m for m in world.event_messages())
    assert [call for call, _ in world.agentctl.calls].count("cancel") == 1
    assert requeue is not None
    # The operator wrote its status and left the proxy's usage as it was.
    assert world.status()["usage"]["inputTokens"] == 600
    # Again: nothing new to tell, nothing to cancel.
    await world.reconcile()
    assert [call for call, _ in world.agentctl.calls].count("cancel") == 1
    assert world.event_reasons().count("BudgetExhausted") == 1

    await world.patch_spec(budget={"maxTokens": 5000})
    await world.reconcile()
    budget = world.condition("BudgetExhausted")
    assert budget is not None
    assert (budget["status"], budget["reason"]) == ("False", "WithinBudget")
    assert ("Normal", "BudgetRaised") in world.events()
    assert world.status()["phase"] == "Ready"


async def test_the_namespace_and_the_operator_give_the_limits_the_session_leaves_unset() -> None:
    world = EgressWorld(default_budget={"maxRequests": 10})
    world.namespace(**{BUDGET_ANNOTATION: '{"maxCostUSD": "1.50"}'})
    await world.until_ready()
    budget = world.condition("BudgetExhausted")
    assert budget is not None
    assert budget["message"] == "within the budget (maxCostUSD $1.50, maxRequests 10)"
    world.write_usage(requests=2, costUSD="1.5")
    await world.reconcile()
    budget = world.condition("BudgetExhausted")
    assert budget is not None
    assert budget["message"] == "a cost of $1.5 reached the budget of $1.50"
    world.write_usage(costUSD="0.1", requests=10)
    await world.reconcile()
    budget = world.condition("BudgetExhausted")
    assert budget is not None
    assert budget["message"] == "10 model requests reached the budget of 10"


async def test_a_status_write_of_the_operator_never_carries_usage() -> None:
    world = EgressWorld()
    await world.until_ready(budget={"maxRequests": 1})
    world.write_usage(requests=1)
    patches: list[dict[str, Any]] = []
    original = world.kube.patch

    async def recording(resource: Any, namespace: Any, name: str, patch: Any, *, status: bool = False) -> Any:
        if status:
            patches.append(patch)
        return await original(resource, namespace, name, patch, status=status)

    world.kube.patch = recording  # type: ignore[method-assign]
    await world.reconcile()
    assert patches, "the condition turned: a status write was due"
    assert all("usage" not in p["status"] for p in patches)


async def test_a_session_without_usage_and_without_a_proxy_reads_no_namespace() -> None:
    world = World()
    await world.until_ready()
    await world.reconcile()
    assert "get Namespace " + NS not in world.kube.verbs()
    budget = world.condition("BudgetExhausted")
    assert budget is not None
    assert budget["message"] == "no budget limits this session"


def _body(
    usage: dict[str, Any] | None, budget: dict[str, Any] | None, exhausted: str | None
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if usage is not None:
        status["usage"] = usage
    if exhausted is not None:
        status["conditions"] = [{"type": "BudgetExhausted", "status": exhausted}]
    return {"spec": {"budget": budget} if budget else {}, "status": status}


@pytest.mark.parametrize(
    ("body", "annotations", "turned"),
    [
        (_body(None, {"maxTokens": 1}, "False"), {}, False),
        (_body({"outputTokens": 5}, {"maxTokens": 10}, "False"), {}, False),
        (_body({"outputTokens": 10}, {"maxTokens": 10}, "False"), {}, True),
        (_body({"outputTokens": 10}, {"maxTokens": 10}, None), {}, True),
        (_body({"outputTokens": 12}, {"maxTokens": 10}, "True"), {}, False),
        (_body({"outputTokens": 12}, {"maxTokens": 20}, "True"), {}, True),
        (_body({"outputTokens": 12}, None, "False"), {BUDGET_ANNOTATION: '{"maxTokens": 5}'}, True),
        (_body({"outputTokens": 1}, None, "False"), None, True),
    ],
)
def test_only_a_usage_that_turns_the_condition_brings_a_reconcile(
    body: dict[str, Any], annotations: dict[str, str] | None, turned: bool
) -> None:
    assert budget_turned(body, annotations, Budget()) is turned


# --- the namespace cache and the proxy's address ---


async def test_namespace_annotations_are_read_once_per_ttl() -> None:
    kube = FakeKube()
    kube.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "annotations": {"a": "1"}}})
    now = [0.0]
    cache = NamespaceAnnotations(kube, clock=lambda: now[0])
    assert cache.cached(NS) is None
    assert await cache.get(NS) == {"a": "1"}
    await kube.patch(NAMESPACES, None, NS, {"metadata": {"annotations": {"a": "2"}}})
    assert await cache.get(NS) == {"a": "1"}
    now[0] += TTL_SECONDS
    assert await cache.get(NS) == {"a": "2"}
    assert kube.verbs("Namespace").count(f"get Namespace {NS}") == 2
    assert await cache.get("gone") == {}


async def test_a_namespace_the_operator_may_not_read_has_no_annotations() -> None:
    kube = FakeKube()
    kube.refuse("get", "Namespace", 403, 'namespaces "team" is forbidden')
    assert await NamespaceAnnotations(kube).get(NS) == {}


def _service(address: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": PROXY.service_name, "namespace": PROXY.service_namespace},
            "spec": {"clusterIP": address, "ports": [{"port": 8080}]}}  # fmt: skip


async def test_the_proxys_address_follows_its_service() -> None:
    kube = FakeKube()
    seen: asyncio.Queue[str | None] = asyncio.Queue()
    proxy = ProxyAddress(kube, PROXY, seen.put_nowait)
    await proxy.start()

    async def next_address() -> str | None:
        async with asyncio.timeout(5):
            return await seen.get()

    try:
        assert proxy.address is None
        await kube.create(_service(ADDRESS))
        assert await next_address() == ADDRESS
        other = _service("10.96.0.50")
        other["metadata"]["name"] = "something-else"
        await kube.create(other)
        kube.put(_service("10.96.9.9"))
        assert await next_address() == "10.96.9.9"
        assert proxy.address == "10.96.9.9"
        await kube.delete(SERVICES, PROXY.service_namespace, PROXY.service_name)
        assert await next_address() is None
        assert proxy.address is None
        assert seen.empty()
    finally:
        await proxy.stop()


async def test_the_address_known_at_start_is_read_before_anything_else() -> None:
    kube = FakeKube()
    kube.put(_service(ADDRESS))
    proxy = ProxyAddress(kube, PROXY, lambda _: None)
    await proxy.start()
    try:
        assert proxy.address == ADDRESS
    finally:
        await proxy.stop()


@pytest.mark.parametrize(("address", "usable"), [("10.0.0.1", "10.0.0.1"), ("None", None), ("", None)])
def test_a_headless_or_unallocated_service_has_no_address(address: str, usable: str | None) -> None:
    assert cluster_ip(_service(address)) == usable


async def test_the_session_is_reconciled_on_a_usage_write_only_when_it_turns() -> None:
    # The status write of the proxy is status-only; the handler's trigger reads it with the cached annotations.
    world = EgressWorld()
    await world.until_ready(budget={"maxRequests": 2})
    world.write_usage(requests=1)
    assert not budget_turned(world.session(), {}, world.config.default_budget)
    world.write_usage(requests=2)
    assert budget_turned(world.session(), {}, world.config.default_budget)
