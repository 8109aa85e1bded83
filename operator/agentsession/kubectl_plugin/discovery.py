"""Where the gateway is: the chart's gateway Service that serves a namespace, reached through `kubectl
port-forward` on a free loopback port, or a URL as a person types it."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import re
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from agentsession.kubectl_plugin.credentials import Cluster, Target
from agentsession.kubectl_plugin.errors import PluginError
from agentsession.kubectl_plugin.names import GATEWAY_SELECTOR, NAMESPACES_ANNOTATION


@dataclass(frozen=True)
class GatewayService:
    namespace: str
    name: str
    port: int
    serves: tuple[str, ...]  # namespaces or globs; empty: every namespace

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def service_view(service: dict[str, Any]) -> GatewayService:
    meta = service["metadata"]
    ports = service["spec"].get("ports") or [{}]
    port = next((p for p in ports if p.get("name") == "http"), ports[0]).get("port", 80)
    try:
        serves = tuple(
            str(ns) for ns in json.loads((meta.get("annotations") or {}).get(NAMESPACES_ANNOTATION, "[]"))
        )
    except ValueError:
        serves = ()
    return GatewayService(meta["namespace"], meta["name"], int(port), serves)


def pick_gateway(services: list[GatewayService], namespace: str) -> GatewayService:
    """The gateway that serves `namespace`: one that names it beats one that serves every namespace."""
    serving = [
        s for s in services if not s.serves or any(fnmatch.fnmatchcase(namespace, p) for p in s.serves)
    ]
    named = [s for s in serving if s.serves]
    chosen = named or serving
    if len(chosen) == 1:
        return chosen[0]
    found = ", ".join(f"{s} (serves {', '.join(s.serves) or 'every namespace'})" for s in services) or "none"
    if not chosen:
        raise PluginError(
            f"no AgentSession gateway serves namespace {namespace} (gateway Services: {found}); "
            "install the chart for it, or give --gateway URL"
        )
    raise PluginError(
        f"several gateways serve namespace {namespace}: {found}; choose one with --gateway-service NAMESPACE/NAME"
    )


def find_gateway(cluster: Cluster, namespace: str, named: str | None) -> GatewayService:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(cluster.api())
    try:
        if named:
            service_ns, _, name = named.rpartition("/")
            found = core.read_namespaced_service(name, service_ns or namespace)
            return service_view(cluster.api().sanitize_for_serialization(found))
        items = core.list_service_for_all_namespaces(label_selector=GATEWAY_SELECTOR).items
    except ApiException as exc:
        if named:
            raise PluginError(f"cannot read the gateway Service {named}: {exc.status} {exc.reason}") from exc
        raise PluginError(
            f"cannot list Services to find the gateway ({exc.status} {exc.reason}); name it with "
            "--gateway-service NAMESPACE/NAME (the chart's is <release>-gateway in the release namespace) "
            "or give --gateway URL"
        ) from exc
    return pick_gateway([service_view(cluster.api().sanitize_for_serialization(s)) for s in items], namespace)


@contextlib.asynccontextmanager
async def port_forward(cluster: Cluster, service: GatewayService, within: float = 30.0) -> AsyncIterator[str]:
    """`kubectl port-forward` to the Service on a free loopback port while the block runs; yields the ws URL."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise PluginError(
            "kubectl is not on the PATH: it forwards a port to the gateway (or give --gateway URL)"
        )
    command = [kubectl, *cluster.kubectl_args(), "-n", service.namespace, "port-forward", "--address",
               "127.0.0.1", f"svc/{service.name}", f":{service.port}"]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        port = await _forwarded_port(proc.stdout, service, within)
        # kubectl goes on writing a line per connection; its pipe must not fill up.
        drain = asyncio.create_task(_discard(proc.stdout))
        try:
            await wait_ready(f"http://127.0.0.1:{port}", within)
            yield f"ws://127.0.0.1:{port}/ws"
        finally:
            drain.cancel()
    finally:
        if proc.returncode is None:
            proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5)


async def _forwarded_port(stdout: asyncio.StreamReader, service: GatewayService, within: float) -> int:
    said: list[str] = []
    try:
        async with asyncio.timeout(within):
            while raw := await stdout.readline():
                line = raw.decode(errors="replace").strip()
                said.append(line)
                if found := re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line):
                    return int(found.group(1))
    except TimeoutError:
        raise PluginError(f"kubectl port-forward to {service} said nothing within {within:.0f}s") from None
    raise PluginError(f"kubectl port-forward to {service} ended: {' '.join(said)[-500:]}")


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def wait_ready(base: str, within: float) -> None:
    """Until the gateway answers /readyz (it has loaded the AgentSessions)."""
    deadline = time.monotonic() + within
    last = "no answer"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(f"{base}/readyz") as resp:
                    if resp.status == 200:
                        return
                    last = f"/readyz answered {resp.status}"
            except (aiohttp.ClientError, OSError) as exc:
                last = str(exc) or type(exc).__name__
            await asyncio.sleep(0.2)
    raise PluginError(f"the gateway at {base} is not ready: {last}")


def gateway_ws_url(value: str) -> str:
    """ws(s)://HOST:PORT/ws from what a person types: a host:port, an http(s) or ws(s) URL, with or without /ws."""
    url = value.rstrip("/")
    if "://" not in url:
        url = f"ws://{url}"
    scheme, rest = url.split("://", 1)
    scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    if "/" not in rest:
        rest += "/ws"
    return f"{scheme}://{rest}"


@contextlib.asynccontextmanager
async def gateway_url(target: Target) -> AsyncIterator[str]:
    if target.gateway:
        yield gateway_ws_url(target.gateway)
        return
    # The port-forward's end is on loopback: the token never crosses the network in the clear.
    service = await asyncio.to_thread(find_gateway, target.cluster, target.namespace, target.gateway_service)
    async with port_forward(target.cluster, service) as url:
        yield url
