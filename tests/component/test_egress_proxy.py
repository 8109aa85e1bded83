"""The egress proxy as a real process on loopback, between a real HTTP client playing the agent and the model stub
standing in for the vendors over TLS, with the sessions, Secrets and pods on a real API server.

No kubelet runs these pods: each is held unschedulable and given a status (phase Running, a loopback podIP) the way
a kubelet would write it, so the proxy, on loopback too, sees the client's calls as that pod's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from agentsession.api.constants import GROUP, LABEL_MANAGED_BY, LABEL_SESSION, MANAGER, PLURAL, VERSION
from agentsession.api.egress import PHANTOM_DIGEST_ANNOTATION, new_phantom, phantom_digest
from tests.support.egress import VENDOR_HOSTS, Certificates, Proxy, egress_proxy, make_certificates, tls_stub
from tests.support.kube import NOWHERE

pytestmark = [pytest.mark.cluster]

ALLOWED_HOST = "pypi.org"  # a stand-in name on the session's allowlist: the stub answers for it
REFUSED_HOST = "evil.example"
WAIT = 30.0


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"), [*VENDOR_HOSTS, ALLOWED_HOST])


@pytest.fixture
def egress_namespace(kube_api: Any, crd_installed: list[str]) -> Iterator[str]:
    """A namespace of its own (no operator of the test runs watches this prefix), deleted afterwards."""
    core: Any = client.CoreV1Api(kube_api)
    name = f"egp-{uuid.uuid4().hex[:8]}"
    core.create_namespace(
        {"metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "agentsession-tests"}}}
    )
    try:
        yield name
    finally:
        core.delete_namespace(name, body=client.V1DeleteOptions(propagation_policy="Background"))


class Cluster:
    """Sessions, their Secrets and pods as the operator and a kubelet would leave them."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.core: Any = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.namespace = namespace
        self._next_ip = 10

    def session(self, name: str, agent_type: str, key_env: str, **spec: Any) -> dict[str, Any]:
        key = f"real-{agent_type}-key-{uuid.uuid4().hex}"
        self.core.create_namespaced_secret(
            self.namespace,
            {
                "metadata": {"name": f"{name}-keys"},
                "data": {key_env: base64.b64encode(key.encode()).decode()},
            },
        )
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AgentSession",
            "metadata": {"name": name},
            "spec": {
                "agent": {"type": agent_type, "credentialsSecretRef": {"name": f"{name}-keys"}},
                "suspend": True,
                **spec,
            },
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        phantom = new_phantom()
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        self.pod(f"{name}-agent", name, phantom, ip)
        return {"name": name, "key": key, "phantom": phantom, "ip": ip}

    def pod(self, pod_name: str, session: str | None, phantom: str, ip: str) -> None:
        labels = {LABEL_MANAGED_BY: MANAGER, **({LABEL_SESSION: session} if session else {})}
        body = {
            "metadata": {
                "name": pod_name,
                "labels": labels,
                "annotations": {PHANTOM_DIGEST_ANNOTATION: phantom_digest(phantom)},
            },
            "spec": {"nodeSelector": NOWHERE, "containers": [{"name": "agent", "image": "agentsession:dev"}]},
        }
        self.core.create_namespaced_pod(self.namespace, body)
        status = {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}
        self.core.patch_namespaced_pod_status(pod_name, self.namespace, status)

    def get(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return found

    def usage(self, name: str) -> dict[str, Any]:
        return dict((self.get(name).get("status") or {}).get("usage") or {})

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec}
        )

    def events(self, name: str, reason: str) -> list[Any]:
        found = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}")
        return [event for event in found.items if event.reason == reason]


@pytest.fixture
def cluster(kube_api: Any, egress_namespace: str) -> Cluster:
    return Cluster(kube_api, egress_namespace)


@pytest.fixture
async def stub(certificates: Certificates, tmp_path: Path) -> AsyncIterator[int]:
    async with tls_stub(certificates, tmp_path / "stub.log") as (_, port):
        yield port


def proxy_args(namespace: str, certificates: Certificates, stub_port: int, *extra: str) -> list[str]:
    resolve = [
        arg
        for host in (*VENDOR_HOSTS, ALLOWED_HOST)
        for arg in ("--resolve", f"{host}=127.0.0.1:{stub_port}")
    ]
    return ["--namespaces", namespace, "--upstream-ca-file", str(certificates.ca), "--flush-interval-seconds", "0.2",
            *resolve, *extra]  # fmt: skip


@pytest.fixture
async def proxy(
    cluster: Cluster, certificates: Certificates, stub: int, tmp_path: Path
) -> AsyncIterator[Proxy]:
    async with egress_proxy(
        proxy_args(cluster.namespace, certificates, stub), tmp_path / "proxy.log"
    ) as running:
        yield running


def agent_http(ip: str) -> aiohttp.ClientSession:
    """An HTTP client calling from `ip`, as the agent in the pod with that address would."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ip, 0), force_close=True))


# Each provider's streamed call as its agent makes it: path under the model route, headers, body.
def anthropic_call(phantom: str, prompt: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    body = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 100, "tools": [{"name": "Write"}],
            "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
    return "anthropic/v1/messages", {"x-api-key": phantom, "anthropic-version": "2023-06-01"}, body


def openai_call(phantom: str, prompt: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    body = {"model": "gpt-5-codex", "stream": True, "input": prompt, "tools": [{"name": "shell"}]}
    return "openai/responses", {"Authorization": f"Bearer {phantom}"}, body


def gemini_call(phantom: str, prompt: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    body = {
        "contents": [{"role": "user", "parts": [{"text": prompt}]}],
        "tools": [{"functionDeclarations": []}],
    }
    return (
        "gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        {"x-goog-api-key": phantom},
        body,
    )


PROVIDERS = {
    "anthropic": ("claude-code", "ANTHROPIC_API_KEY", anthropic_call),
    "openai": ("codex", "OPENAI_API_KEY", openai_call),
    "gemini": ("gemini", "GEMINI_API_KEY", gemini_call),
}


async def call(
    proxy: Proxy, provider: str, agent: dict[str, Any], prompt: str = "hello"
) -> tuple[int, bytes]:
    path, headers, body = PROVIDERS[provider][2](agent["phantom"], prompt)
    async with (
        agent_http(agent["ip"]) as http,
        http.post(f"{proxy.url}/v1/model/{path}", headers=headers, json=body) as response,
    ):
        return response.status, await response.read()


async def stub_requests(certificates: Certificates, port: int) -> list[dict[str, Any]]:
    context = certificates.client_context()
    context.check_hostname = False
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"https://127.0.0.1:{port}/requests", ssl=context) as response,
    ):
        found: list[dict[str, Any]] = await response.json()
        return found


async def until(what: str, probe: Any, within: float = WAIT) -> Any:
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last: {last!r}")


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_streamed_turn_passes_through_chunk_by_chunk_with_the_real_key(
    provider: str, cluster: Cluster, proxy: Proxy, stub: int, certificates: Certificates
) -> None:
    agent_type, key_env, make = PROVIDERS[provider]
    agent = cluster.session("s1", agent_type, key_env)
    path, headers, body = make(agent["phantom"], "be slow please")
    arrivals: list[float] = []
    async with (
        agent_http(agent["ip"]) as http,
        http.post(f"{proxy.url}/v1/model/{path}", headers=headers, json=body) as response,
    ):
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for chunk in response.content:
            if b"Slow chunk" in chunk:
                arrivals.append(time.monotonic())
            if len(arrivals) == 3:
                break
    # The stub sends a chunk every 0.3 s for a minute: they arrive as sent, long before the stream ends.
    assert arrivals[2] - arrivals[0] >= 0.5
    assert arrivals[2] - arrivals[0] < 5
    status, answer = await call(proxy, provider, agent, "hello there")
    assert status == 200
    assert (
        b"Hello from the model stub. You said: hello there" in answer.replace(b'"', b"")
        or b"hello there" in answer
    )
    received = await stub_requests(certificates, stub)
    assert [r["api_key"] for r in received] == [agent["key"], agent["key"]]
    assert all(agent["phantom"] not in json.dumps(r) for r in received)
    # 10 input tokens per call, as the stub reports. Of the cut stream, only Anthropic's says anything (its first
    # event has the input side); the others report usage at the end only.
    cut = 10 if provider == "anthropic" else 0
    usage = await until(
        "status.usage of s1", lambda: _usage_with(cluster, "s1", requests=2, inputTokens=10 + cut)
    )
    assert usage["outputTokens"] > 0
    wanted = f'agentsession_model_requests_total{{agent_type="{agent_type}",model="other",namespace="{cluster.namespace}"}} 2.0'

    async def counted() -> str | None:
        metrics = await proxy.metrics()
        return metrics if wanted in metrics else None

    metrics = await until("both calls in the metrics", counted)
    assert "s1" not in metrics.replace(cluster.namespace, "")


async def _usage_with(cluster: Cluster, name: str, **wanted: int) -> dict[str, Any] | None:
    usage = await asyncio.to_thread(cluster.usage, name)
    return usage if all(usage.get(k) == v for k, v in wanted.items()) else None


async def test_credentials_that_do_not_bind_are_refused_in_the_providers_shape(
    cluster: Cluster, proxy: Proxy, stub: int, certificates: Certificates
) -> None:
    agent = cluster.session("s1", "claude-code", "ANTHROPIC_API_KEY")
    unknown = {**agent, "phantom": new_phantom()}
    status, body = await call(proxy, "anthropic", unknown)
    assert (status, json.loads(body)["error"]["type"]) == (401, "unknown_credential")
    elsewhere = {**agent, "ip": "127.0.0.99"}
    status, body = await call(proxy, "anthropic", elsewhere)
    assert (status, json.loads(body)["error"]["type"]) == (403, "credential_not_bound")
    # A claude-code session's phantom on the OpenAI route.
    status, body = await call(proxy, "openai", agent)
    assert (status, json.loads(body)["error"]["code"]) == (403, "credential_not_bound")
    # A warm pool pod no session has claimed.
    pool_phantom = new_phantom()
    cluster.pod("pool-abcde-agent", None, pool_phantom, "127.0.0.50")

    async def unclaimed() -> bool:
        status, body = await call(proxy, "gemini", {"phantom": pool_phantom, "ip": "127.0.0.50"})
        return status == 403 and json.loads(body)["error"]["details"][0]["reason"] == "not_claimed"

    await until("the pool pod's phantom refused as not claimed", unclaimed)
    assert await stub_requests(certificates, stub) == []
    # The pod goes: its phantom is revoked.
    assert (await call(proxy, "anthropic", agent))[0] == 200
    cluster.core.delete_namespaced_pod(f"{agent['name']}-agent", cluster.namespace, grace_period_seconds=0)

    async def revoked() -> bool:
        status, body = await call(proxy, "anthropic", agent)
        return status == 403 and json.loads(body)["error"]["type"] == "credential_not_bound"

    await until("the deleted pod's phantom refused", revoked)


async def test_connect_reaches_allowed_hosts_and_refuses_others_with_the_reason(
    cluster: Cluster, proxy: Proxy, certificates: Certificates
) -> None:
    agent = cluster.session(
        "s1", "claude-code", "ANTHROPIC_API_KEY", network={"egress": {"allow": [ALLOWED_HOST]}}
    )
    # Real TLS through the tunnel, verified for the allowed name.
    async with (
        agent_http(agent["ip"]) as http,
        http.get(
            f"https://{ALLOWED_HOST}/healthz", proxy=proxy.url, ssl=certificates.client_context()
        ) as response,
    ):
        assert response.status == 200
        assert await response.json() == {"status": "ok"}
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port, local_addr=(agent["ip"], 0))
    writer.write(f"CONNECT {REFUSED_HOST}:443 HTTP/1.1\r\nHost: {REFUSED_HOST}:443\r\n\r\n".encode())
    refused = (await asyncio.wait_for(reader.read(), WAIT)).decode()
    writer.close()
    assert refused.startswith("HTTP/1.1 403 ")
    assert REFUSED_HOST in refused
    assert f"{cluster.namespace}/s1" in refused
    assert "add it to spec.network.egress.allow" in refused
    # Plain HTTP to a refused host: the same.
    async with (
        agent_http(agent["ip"]) as http,
        http.get(f"http://{REFUSED_HOST}/", proxy=proxy.url) as response,
    ):
        assert response.status == 403
        assert "spec.network.egress.allow" in await response.text()
    events = await until(
        "an EgressDenied event", lambda: asyncio.to_thread(cluster.events, "s1", "EgressDenied")
    )
    assert events[0].type == "Warning"
    assert REFUSED_HOST in events[0].message
    assert len(events) == 1  # rate-limited: one per session and host
    metrics = await proxy.metrics()
    assert (
        f'agentsession_egress_denied_total{{namespace="{cluster.namespace}",reason="host_not_allowed"}} 2.0'
        in metrics
    )


async def test_the_budget_refuses_after_its_limit_and_raising_it_lets_calls_go_on(
    cluster: Cluster, proxy: Proxy
) -> None:
    agent = cluster.session("s1", "codex", "OPENAI_API_KEY", budget={"maxRequests": 2})
    assert (await call(proxy, "openai", agent))[0] == 200
    assert (await call(proxy, "openai", agent))[0] == 200
    status, body = await call(proxy, "openai", agent)
    error = json.loads(body)["error"]
    assert (status, error["type"]) == (403, "budget_exhausted")
    assert (
        error["message"]
        == "budget exhausted: 2 model requests reached the budget of 2; raise spec.budget to go on"
    )
    cluster.patch_spec("s1", {"budget": {"maxRequests": 3}})

    async def goes_on() -> bool:
        return (await call(proxy, "openai", agent))[0] == 200

    await until("a call after raising the budget", goes_on)
    assert (await call(proxy, "openai", agent))[0] == 403
    await until("status.usage with 3 requests", lambda: _usage_with(cluster, "s1", requests=3))


async def test_usage_survives_a_restart_and_two_proxies_add_up(
    cluster: Cluster, certificates: Certificates, stub: int, tmp_path: Path
) -> None:
    agent = cluster.session("s1", "gemini", "GEMINI_API_KEY")
    args = proxy_args(cluster.namespace, certificates, stub)
    async with egress_proxy(args, tmp_path / "first.log") as first:
        for _ in range(3):
            assert (await call(first, "gemini", agent))[0] == 200
    # Stopped: what it metered is in the status.
    assert (await _usage_with(cluster, "s1", requests=3, inputTokens=30)) is not None
    async with (
        egress_proxy(args, tmp_path / "second.log") as second,
        egress_proxy(args, tmp_path / "third.log") as third,
    ):
        calls = [call(proxy, "gemini", agent) for proxy in (second, third) for _ in range(10)]
        assert {status for status, _ in await asyncio.gather(*calls)} == {200}
        # Requests count as they start, tokens as they end: both are all there once written.
        await until("20 more requests", lambda: _usage_with(cluster, "s1", requests=23, inputTokens=230))
