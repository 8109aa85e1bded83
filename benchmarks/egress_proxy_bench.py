"""Egress proxy benchmark: what the proxy adds to a model call, how fast it tunnels, what a session costs it.

The proxy under test is the real `agentsession-egress-proxy` process; the vendor is the model stub over TLS (a
test CA, named through `--resolve`); the Kubernetes API is a minimal list+watch server in this process holding
the sessions, their pods (each at its own loopback address, which the client calls from) and Secrets. Measured:

- time to first byte of a streamed Anthropic answer, p50/p99, through the proxy and straight to the stub;
- CONNECT throughput of one large transfer from a plain TCP stand-in (the proxy relays bytes; TLS inside the
  tunnel would only measure Python's TLS);
- the proxy's memory per 1,000 sessions: its RSS with none, then with N sessions and pods watched, then after
  one model call of each (its ledger entry and cached Secret).

`python -m benchmarks.egress_proxy_bench [--calls N] [--sessions N] [--megabytes N]`; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from tests.support.egress import VENDOR_HOSTS, Certificates, egress_proxy, make_certificates, tls_stub

from agentsession.api.constants import GROUP, LABEL_MANAGED_BY, LABEL_SESSION, MANAGER, PLURAL, VERSION
from agentsession.api.egress import PHANTOM_DIGEST_ANNOTATION, new_phantom, phantom_digest
from agentsession.egress_proxy.upstream import PolicyResolver, tls_context
from benchmarks.procfs import rss_bytes

NAMESPACE = "bench"
TUNNEL_HOST = "big.example"
SESSIONS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
PROMPT_BODY = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 64, "tools": [{"name": "Write"}],
               "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
CHUNK = 256 * 1024


class ListWatchApi:
    """Pods, AgentSessions and Namespaces listed and watched; Secrets and sessions read; status patched."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            "pods": {},
            "sessions": {},
            "namespaces": {},
        }
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self._watchers: dict[str, list[web.StreamResponse]] = {kind: [] for kind in self.objects}
        self.version = 1
        self.url = ""

    async def put(self, kind: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        meta = obj["metadata"]
        self.objects[kind][(meta.get("namespace", ""), meta["name"])] = obj
        line = (json.dumps({"type": "ADDED", "object": obj}) + "\n").encode()
        for watcher in list(self._watchers[kind]):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await watcher.write(line)

    def _lister(self, kind: str) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            if request.query.get("watch", "").lower() not in ("true", "1"):
                items = list(self.objects[kind].values())
                return web.json_response({"items": items, "metadata": {"resourceVersion": str(self.version)}})
            response = web.StreamResponse()
            response.content_type = "application/json"
            await response.prepare(request)
            self._watchers[kind].append(response)
            try:
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await asyncio.sleep(3600)
            finally:
                self._watchers[kind].remove(response)
            return response

        return handle

    async def _secret(self, request: web.Request) -> web.Response:
        found = self.secrets.get((request.match_info["ns"], request.match_info["name"]))
        return (
            web.json_response(found)
            if found
            else web.json_response({"code": 404, "reason": "NotFound"}, status=404)
        )

    async def _session(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        found = self.objects["sessions"].get(key)
        if found is None:
            return web.json_response({"code": 404, "reason": "NotFound"}, status=404)
        if request.method == "PATCH":
            patch = await request.json()
            found["status"] = {**found.get("status", {}), **patch.get("status", {})}
            self.version += 1
            found["metadata"]["resourceVersion"] = str(self.version)
        return web.json_response(found)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[ListWatchApi]:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._lister("pods"))
        app.router.add_get(SESSIONS_PATH, self._lister("sessions"))
        app.router.add_get("/api/v1/namespaces", self._lister("namespaces"))
        app.router.add_get("/api/v1/namespaces/{ns}/secrets/{name}", self._secret)
        session = f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}/{{name}}"
        app.router.add_get(session, self._session)
        app.router.add_patch(session + "/status", self._session)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))  # fmt: skip
        return path


def address(i: int) -> str:
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


async def add_session(api: ListWatchApi, i: int) -> dict[str, str]:
    name, phantom = f"s{i}", new_phantom()
    key = base64.b64encode(f"real-key-{i}".encode()).decode()
    api.secrets[(NAMESPACE, f"{name}-keys")] = {"kind": "Secret", "metadata": {"name": f"{name}-keys"},
                                                "data": {"ANTHROPIC_API_KEY": key}}  # fmt: skip
    await api.put("sessions", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentSession",
        "metadata": {"namespace": NAMESPACE, "name": name, "uid": f"uid-{i}"},
        "spec": {"agent": {"type": "claude-code", "credentialsSecretRef": {"name": f"{name}-keys"}},
                 "network": {"egress": {"allow": [TUNNEL_HOST]}}},
        "status": {"phase": "Ready"},
    })  # fmt: skip
    await api.put("pods", {
        "metadata": {"namespace": NAMESPACE, "name": f"{name}-agent", "labels": {LABEL_MANAGED_BY: MANAGER,
                     LABEL_SESSION: name}, "annotations": {PHANTOM_DIGEST_ANNOTATION: phantom_digest(phantom)}},
        "status": {"phase": "Running", "podIP": address(i)},
    })  # fmt: skip
    return {"phantom": phantom, "ip": address(i)}


async def first_byte(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    async with http.post(url, headers=headers, json=PROMPT_BODY) as response:
        assert response.status == 200, await response.text()
        await response.content.readany()
        elapsed = time.perf_counter() - started
        await response.read()
    return elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def time_to_first_byte(
    proxy_url: str, agent: dict[str, str], stub_port: int, certs: Certificates, calls: int
) -> dict[str, float]:
    resolver = PolicyResolver({host: ("127.0.0.1", stub_port) for host in VENDOR_HOSTS})
    direct = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(resolver=resolver, ssl=tls_context(certs.ca))
    )
    through = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(agent["ip"], 0)))
    headers = {"x-api-key": agent["phantom"], "anthropic-version": "2023-06-01"}
    results: dict[str, list[float]] = {"direct": [], "proxy": []}
    try:
        for _ in range(5):  # warm both connection pools
            await first_byte(direct, "https://api.anthropic.com/v1/messages", {"x-api-key": "real"})
            await first_byte(through, f"{proxy_url}/v1/model/anthropic/v1/messages", headers)
        for _ in range(calls):
            results["direct"].append(
                await first_byte(direct, "https://api.anthropic.com/v1/messages", {"x-api-key": "real"})
            )
            results["proxy"].append(
                await first_byte(through, f"{proxy_url}/v1/model/anthropic/v1/messages", headers)
            )
    finally:
        await direct.close()
        await through.close()
    figures = {
        f"{k}_{q}_ms": percentile(v, p) * 1000
        for k, v in results.items()
        for q, p in (("p50", 0.5), ("p99", 0.99))
    }
    figures["added_p50_ms"] = figures["proxy_p50_ms"] - figures["direct_p50_ms"]
    figures["added_p99_ms"] = figures["proxy_p99_ms"] - figures["direct_p99_ms"]
    return figures


async def serve_bytes(total: int) -> tuple[asyncio.Server, int]:
    block = b"\0" * CHUNK

    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < total:
                writer.write(block[: min(CHUNK, total - sent)])
                sent += CHUNK
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(send, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


async def receive(reader: asyncio.StreamReader, total: int) -> float:
    started, got = time.perf_counter(), 0
    while got < total:
        chunk = await reader.read(CHUNK)
        if not chunk:
            break
        got += len(chunk)
    assert got >= total, f"received {got} of {total} bytes"
    return total / (time.perf_counter() - started) / 1e6


async def tunnel_throughput(
    proxy_port: int, agent: dict[str, str], source_port: int, total: int
) -> dict[str, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", source_port, limit=CHUNK)
    direct = await receive(reader, total)
    writer.close()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", proxy_port, local_addr=(agent["ip"], 0), limit=CHUNK
    )
    writer.write(f"CONNECT {TUNNEL_HOST}:443 HTTP/1.1\r\nHost: {TUNNEL_HOST}:443\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    through = await receive(reader, total)
    writer.close()
    return {"direct_mb_s": direct, "proxy_mb_s": through}


async def wait_served(proxy_url: str, agent: dict[str, str]) -> None:
    """Until the proxy's directory holds the session of `agent` (its call goes through)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(agent["ip"], 0))) as http:
        for _ in range(600):
            headers = {"x-api-key": agent["phantom"], "anthropic-version": "2023-06-01"}
            async with http.post(
                f"{proxy_url}/v1/model/anthropic/v1/messages", headers=headers, json=PROMPT_BODY
            ) as r:
                await r.read()
                if r.status == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError("the proxy never saw the benchmark's sessions")


async def call_each(proxy_url: str, agents: list[dict[str, str]]) -> None:
    gate = asyncio.Semaphore(16)

    async def one(agent: dict[str, str]) -> None:
        async with (
            gate,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(agent["ip"], 0))) as http,
        ):
            headers = {"x-api-key": agent["phantom"], "anthropic-version": "2023-06-01"}
            async with http.post(
                f"{proxy_url}/v1/model/anthropic/v1/messages", headers=headers, json=PROMPT_BODY
            ) as r:
                assert r.status == 200, await r.text()
                await r.read()

    await asyncio.gather(*(one(agent) for agent in agents))


def _mib(pid: int) -> float:
    return (rss_bytes(pid) or 0) / 2**20


async def run(calls: int, sessions: int, megabytes: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="egress-bench-"))
    certs = make_certificates(work / "tls", list(VENDOR_HOSTS))
    total = megabytes * 2**20
    source, source_port = await serve_bytes(total)
    async with ListWatchApi().serving() as api, tls_stub(certs, work / "stub.log") as (_, stub_port):
        await api.put("namespaces", {"metadata": {"name": NAMESPACE}})
        resolve = [a for host in VENDOR_HOSTS for a in ("--resolve", f"{host}=127.0.0.1:{stub_port}")]
        resolve += ["--resolve", f"{TUNNEL_HOST}=127.0.0.1:{source_port}"]
        args = ["--kubeconfig", str(api.kubeconfig(work / "kubeconfig")), "--upstream-ca-file", str(certs.ca),
                "--log-level", "WARNING", *resolve]  # fmt: skip
        async with egress_proxy(args, work / "proxy.log") as proxy:
            pid = proxy.process.proc.pid
            await asyncio.sleep(1.0)
            rss_empty = _mib(pid)
            agents = [await add_session(api, i) for i in range(sessions)]
            await wait_served(proxy.url, agents[-1])
            await asyncio.sleep(1.0)
            rss_watched = _mib(pid)
            await call_each(proxy.url, agents)
            await asyncio.sleep(2.0)  # a few flushes of the ledger
            rss_called = _mib(pid)
            ttfb = await time_to_first_byte(proxy.url, agents[0], stub_port, certs, calls)
            tunnel = await tunnel_throughput(proxy.port, agents[0], source_port, total)
    source.close()
    per_thousand = 1000 / sessions
    return {
        **ttfb,
        **tunnel,
        "megabytes": megabytes,
        "calls": calls,
        "sessions": sessions,
        "rss_empty_mib": rss_empty,
        "rss_watched_mib": rss_watched,
        "rss_called_mib": rss_called,
        "watched_mib_per_1000": (rss_watched - rss_empty) * per_thousand,
        "called_mib_per_1000": (rss_called - rss_empty) * per_thousand,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.egress_proxy_bench", description=__doc__)
    parser.add_argument("--calls", type=int, default=300, help="streamed calls timed each way")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions and pods the proxy watches")
    parser.add_argument("--megabytes", type=int, default=1024, help="size of the CONNECT transfer")
    args = parser.parse_args(argv)
    if args.sessions > 250 * 250:
        parser.error("--sessions: at most 62500 (one loopback address each)")
    result = asyncio.run(run(args.calls, args.sessions, args.megabytes))
    print(json.dumps(result, indent=2))
    print(
        f"time to first byte: direct p50 {result['direct_p50_ms']:.2f} ms p99 {result['direct_p99_ms']:.2f} ms; "
        f"through the proxy p50 {result['proxy_p50_ms']:.2f} ms p99 {result['proxy_p99_ms']:.2f} ms; "
        f"added p50 {result['added_p50_ms']:.2f} ms (target < 5)\n"
        f"CONNECT, one {result['megabytes']} MiB transfer: {result['proxy_mb_s']:.0f} MB/s "
        f"(direct {result['direct_mb_s']:.0f} MB/s; target >= 100)\n"
        f"memory: {result['rss_empty_mib']:.1f} MiB with no session, {result['rss_watched_mib']:.1f} MiB watching "
        f"{result['sessions']}, {result['rss_called_mib']:.1f} MiB after a call of each: "
        f"{result['watched_mib_per_1000']:.2f} / {result['called_mib_per_1000']:.2f} MiB per 1,000 sessions"
    )
    failed = result["added_p50_ms"] >= 5 or result["proxy_mb_s"] < 100
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
