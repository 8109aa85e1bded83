"""Gateway benchmark: 1,000 concurrent WebSocket clients on loopback, one gateway process.

The gateway under test is the real `agentsession-gateway` process (dev mode, lifecycle dialect). Its Kubernetes
API is a minimal list+watch server in this process, so a status change is an event written at a known instant;
each client stamps the matching `agent_status` frame on arrival. Measured:

- status change → client event latency (p50/p99 over every client and change), paced changes;
- fan-out throughput: client messages per second for a burst of changes;
- memory per connection: the gateway's RSS growth from 0 to N clients, divided by N.

`python -m benchmarks.gateway_bench [--clients N] [--paced K] [--burst K]`; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from tests.support.fake_api import FakeApi
from tests.support.release_key import key_file

BIN = Path(sys.executable).parent
SESSIONS = 10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session(i: int, ready: bool, change: int) -> dict[str, Any]:
    status = "True" if ready else "False"
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"namespace": "bench", "name": f"s{i}", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"agent": {"type": "demo"}, "title": f"change-{change}"},
        "status": {
            "phase": "Ready" if ready else "Starting",
            "conditions": [
                {"type": t, "status": status, "reason": "Bench", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                for t in ("AgentctlReady", "Ready")
            ],
        },
    }


async def _change(api: FakeApi, change: int, sent_at: dict[int, float]) -> None:
    sent_at[change] = time.perf_counter()
    await api.put(_session(change % SESSIONS, ready=change % 2 == 0, change=change))


def _spawn_gateway(port: int, kubeconfig: Path, log: Any) -> subprocess.Popen[bytes]:
    command = [str(BIN / "agentsession-gateway"), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--kubeconfig", str(kubeconfig), "--insecure-dev-mode", "--log-level", "ERROR"]
    command += ["--metrics-port", "0"]  # nothing here scrapes it, and runs side by side would share its port
    command += ["--agentctl-key-file", str(key_file())]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Clients:
    def __init__(self) -> None:
        self.received: dict[int, list[float]] = {}
        self.messages = 0
        self.hello = 0
        self.hello_event = asyncio.Event()
        self.total = 0

    async def run_one(self, http: aiohttp.ClientSession, url: str) -> None:
        async with http.ws_connect(url, max_msg_size=0) as ws:
            async for msg in ws:
                now = time.perf_counter()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                self.messages += 1
                frame = json.loads(msg.data)
                if frame["type"] == "session_state":
                    self.hello += 1
                    if self.hello == self.total:
                        self.hello_event.set()
                elif frame["type"] == "agent_status":
                    title = frame["payload"]["info"]["title"]
                    change = int(title.rsplit("-", 1)[1])
                    if change >= 0:
                        self.received.setdefault(change, []).append(now)


async def _wait(predicate: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark: timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(clients: int, paced: int, burst: int, interval: float) -> dict[str, Any]:
    async with FakeApi().serving() as api:
        return await _measure(api, clients, paced, burst, interval)


async def _measure(api: FakeApi, clients: int, paced: int, burst: int, interval: float) -> dict[str, Any]:
    for i in range(SESSIONS):
        await api.put(_session(i, ready=False, change=-1))
    sent_at: dict[int, float] = {}
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    kubeconfig = api.kubeconfig(workdir / "kubeconfig")
    port = _free_port()
    log = (workdir / "gateway.log").open("wb")
    proc = _spawn_gateway(port, kubeconfig, log)
    tasks: list[asyncio.Task[None]] = []
    try:
        async with aiohttp.ClientSession() as probe:

            async def ready() -> bool:
                with contextlib.suppress(aiohttp.ClientError):
                    async with probe.get(f"http://127.0.0.1:{port}/readyz") as r:
                        return r.status == 200
                return False

            deadline = time.monotonic() + 30
            while not await ready():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the gateway did not become ready")
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        rss_before = _rss_kib(proc.pid)

        c = Clients()
        c.total = clients
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            url = f"ws://127.0.0.1:{port}/ws"
            for i in range(clients):
                tasks.append(asyncio.create_task(c.run_one(http, url)))
                if i % 50 == 49:
                    await asyncio.sleep(0.01)  # stay under the listen backlog
            await asyncio.wait_for(c.hello_event.wait(), 120)
            await asyncio.sleep(1.0)
            rss_after = _rss_kib(proc.pid)

            # Paced changes: latency when the gateway keeps up.
            for change in range(paced):
                await _change(api, change, sent_at)
                await asyncio.sleep(interval)
            await _wait(
                lambda: all(len(c.received.get(k, [])) >= clients for k in range(paced)), 60, "paced events"
            )
            latencies = [(t - sent_at[k]) * 1000 for k in range(paced) for t in c.received[k]]

            # Burst: every change at once, then wait for every client to have every event.
            before = c.messages
            start = time.perf_counter()
            for change in range(paced, paced + burst):
                await _change(api, change, sent_at)
            await _wait(
                lambda: all(len(c.received.get(k, [])) >= clients for k in range(paced, paced + burst)),
                120, "burst events",
            )  # fmt: skip
            elapsed = time.perf_counter() - start
            fanout = (c.messages - before) / elapsed
            burst_lat = [(t - sent_at[k]) * 1000 for k in range(paced, paced + burst) for t in c.received[k]]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for t in tasks:
            t.cancel()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        if proc.poll() is None:
            proc.kill()
        log.close()
    return {
        "clients": clients,
        "paced_changes": paced,
        "paced_interval_ms": interval * 1000,
        "latency_p50_ms": statistics.median(latencies),
        "latency_p99_ms": _pct(latencies, 0.99),
        "latency_max_ms": max(latencies),
        "burst_changes": burst,
        "burst_seconds": elapsed,
        "fanout_messages_per_s": fanout,
        "burst_latency_p50_ms": statistics.median(burst_lat),
        "burst_latency_p99_ms": _pct(burst_lat, 0.99),
        "rss_before_mib": rss_before / 1024,
        "rss_after_mib": rss_after / 1024,
        "memory_per_connection_kib": (rss_after - rss_before) / clients,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gateway_bench")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--paced", type=int, default=40, help="status changes sent one at a time")
    p.add_argument("--interval-ms", type=float, default=100.0, help="time between paced changes")
    p.add_argument("--burst", type=int, default=50, help="status changes sent back to back")
    args = p.parse_args(argv)
    result = asyncio.run(run(args.clients, args.paced, args.burst, args.interval_ms / 1000))
    print(f"clients: {result['clients']} (one gateway process, lifecycle dialect, loopback)")
    print(f"status change -> client event, paced ({result['paced_changes']} changes, "
          f"{result['paced_interval_ms']:.0f} ms apart): p50 {result['latency_p50_ms']:.1f} ms, "
          f"p99 {result['latency_p99_ms']:.1f} ms, max {result['latency_max_ms']:.1f} ms")  # fmt: skip
    print(f"fan-out, burst of {result['burst_changes']} changes: {result['fanout_messages_per_s']:.0f} messages/s "
          f"({result['burst_seconds']:.2f} s; latency p50 {result['burst_latency_p50_ms']:.0f} ms, "
          f"p99 {result['burst_latency_p99_ms']:.0f} ms)")  # fmt: skip
    print(f"memory per connection: {result['memory_per_connection_kib']:.1f} KiB "
          f"(gateway RSS {result['rss_before_mib']:.1f} -> {result['rss_after_mib']:.1f} MiB)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
