"""Scale: a burst of N AgentSessions through one operator process, on simulated (kwok) nodes.

Needs the local cluster with fake nodes (`hack/cluster/kwok.sh up --nodes 10`); no image and no real pod is used.
Pods on kwok nodes turn Running and Ready without containers; every session's agentctl is one stand-in process
(`benchmarks.agentctl_standin`), reached through the operator's and the gateway's agentctl host override. The
benchmark starts its own operator (serving only its namespace), applies N sessions that tolerate the fake nodes'
taint, and measures:

- apply → `AgentctlReady` and → `Ready`, per session (p50/p90/p99) and for all: sessions per second through the
  operator; the operator's share (the pod's Ready, set by kwok, → `AgentctlReady`);
- the operator's CPU (utime + stime from /proc) per 1,000 sessions, and its resident memory at rest after the burst
  (VmRSS from /proc), with bytes per session;
- API requests: the API server's `apiserver_request_total` by verb and resource, during the burst and in a quiet
  window after it (per session per minute: no periodic per-session requests is the goal); the operator's own
  reconciles in that window; Events per session; the API server's open watches;
- a real `agentsession-gateway` started against the namespace afterwards: how long until it follows every agent,
  and one client's `session_state` (size and time) with N agents.

The API server's counters are cluster-wide: other clients of the cluster add to them (the table names the client
behind each row). The namespace is deleted at the end, and the benchmark waits until it is gone.

    python -m benchmarks.scale_bench --sessions 1000      # --quiet-seconds S (60), --concurrency C (50)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from tests.support.gateway import gateway_process
from tests.support.processes import free_port, stop, wait_http

from agentsession.api.constants import API_VERSION, KIND, pod_name
from agentsession.kube.client import ApiKube, connect
from agentsession.kube.resources import AGENT_SESSIONS, EVENTS, PODS
from benchmarks.api_clients import (
    ApiServerCounters,
    RequestKey,
    chart_identities,
    delete_flow_schemas,
    flow_schema_name,
)
from benchmarks.procfs import cpu_by_command, cpu_seconds, rss_bytes
from benchmarks.startup_bench import Seen, bench_namespace, kubectl, operator, percentile, row, watch

KWOK_NODES = "type=kwok"
# Where a session's pod goes: only the fake nodes, which only tolerating pods may use.
ON_KWOK: dict[str, Any] = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
}
# The control plane's processes, by command name (/proc/PID/comm keeps 15 characters), where it runs on this machine.
CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller", "kwok")
# Who sends each kind of request here, for the reader of the table.
CLIENTS = {
    ("POST", "agentsessions", ""): "this benchmark",
    ("PATCH", "agentsessions", ""): "kopf (its annotations)",
    ("PATCH", "agentsessions", "status"): "operator (status)",
    ("GET", "agentsessions", ""): "operator (reconcile)",
    ("POST", "pods", ""): "operator",
    ("POST", "pods", "binding"): "kube-scheduler",
    ("PATCH", "pods", "status"): "kwok (pod stages)",
    ("POST", "secrets", ""): "operator",
    ("GET", "secrets", ""): "operator (token) / gateway",
    ("POST", "events", ""): "operator / kube-scheduler",
    ("LIST", "events", ""): "operator (probe events)",
}


class Tally(Seen):
    """`Seen`, with a count per milestone so that waiting for all N is one condition, not N."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Counter[str] = Counter()

    async def mark(self, name: str, milestone: str) -> None:
        if (name, milestone) not in self.at:
            self.count[milestone] += 1
        await super().mark(name, milestone)

    async def wait_count(self, milestone: str, n: int, within: float) -> float:
        try:
            async with self._changed, asyncio.timeout(within):
                await self._changed.wait_for(lambda: self.count[milestone] >= n)
        except TimeoutError:
            raise TimeoutError(
                f"only {self.count[milestone]} of {n} reached {milestone} within {within:.0f}s "
                f"(counts: {dict(self.count)})"
            ) from None
        return time.monotonic()


@dataclass(frozen=True)
class Usage:
    """One process's CPU seconds (user + system) and resident bytes, read from /proc."""

    cpu: float
    rss: int

    @staticmethod
    def of(pid: int) -> Usage:
        return Usage(cpu_seconds(pid) or 0.0, rss_bytes(pid) or 0)


async def operator_metrics(url: str) -> dict[str, float]:
    """The operator's own counters this benchmark reads, summed over their labels."""
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        text = await response.text()
    wanted = {
        "agentsession_reconcile_duration_seconds_count": "reconciles",
        "agentsession_reconcile_duration_seconds_sum": "reconcile_seconds",
        "agentsession_events_total": "events",
        "agentsession_agentctl_call_duration_seconds_count": "agentctl_calls",
        "agentsession_reconcile_errors_total": "reconcile_errors",
    }
    values: dict[str, float] = dict.fromkeys(wanted.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                values[wanted[sample.name]] += sample.value
    return values


def fake_nodes() -> int:
    out = kubectl("get", "nodes", "-l", KWOK_NODES, "-o", "json")
    return sum(
        any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
        for node in json.loads(out)["items"]
    )


@contextlib.contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    """Samples the process with py-spy (in the dev extra) while the block runs, if asked to."""
    if out is None:
        yield
        return
    spy = subprocess.Popen(
        [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--format", "raw",
         "--rate", "50", "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its samples when interrupted
        spy.wait(timeout=60)
        print(f"operator profile (py-spy, collapsed stacks): {out}", flush=True)


def traced(proc: subprocess.Popen[bytes], out: Path, within: float = 120.0) -> None:
    """Has the operator under tracemalloc (`benchmarks.traced_operator`) write what it holds now."""
    out.unlink(missing_ok=True)
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + within
    while not out.exists():  # written whole, then renamed
        if time.monotonic() > deadline:
            raise TimeoutError(f"the operator wrote no {out} within {within:.0f}s")
        time.sleep(0.5)
    print(f"operator's allocations at rest (tracemalloc): {out}", flush=True)


@contextlib.contextmanager
def standin(port: int) -> Iterator[subprocess.Popen[bytes]]:
    log = Path(tempfile.mkstemp(prefix="scale-bench-standin-", suffix=".log")[1])
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.agentctl_standin", "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 30, proc, log)
        yield proc
    finally:
        stop(proc)


async def standin_stats(port: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/standin/stats") as r:
        stats: dict[str, Any] = await r.json()
    return stats


@dataclass
class Figures:
    sessions: int
    latencies: dict[str, list[float]] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    burst_requests: Counter[RequestKey] = field(default_factory=Counter)


class ScaleBench:
    def __init__(self, kube: ApiKube, namespace: str, sessions: int, concurrency: int) -> None:
        self.kube = kube
        self.ns = namespace
        self.n = sessions
        self.seen = Tally()
        self.applied: dict[str, float] = {}
        self._slots = asyncio.Semaphore(concurrency)
        self.figures = Figures(sessions)

    def manifest(self, name: str) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"agent": {"type": "demo"}, "podTemplate": ON_KWOK},
        }

    async def apply(self, name: str) -> None:
        async with self._slots:
            self.applied[name] = time.monotonic()
            await self.kube.create(self.manifest(name))

    def names(self) -> list[str]:
        return [f"s-{i:05d}" for i in range(self.n)]

    async def burst(self, within: float) -> tuple[float, float, float, float]:
        """Applies every session at once; returns when the first was applied, the last, and when all had
        AgentctlReady and Ready."""
        start = time.monotonic()
        await asyncio.gather(*(self.apply(name) for name in self.names()))
        applied = time.monotonic()
        # The warm-up session counts too.
        agentctl = await self.seen.wait_count("AgentctlReady", self.n + 1, within)
        ready = await self.seen.wait_count("Ready", self.n + 1, within)
        return start, applied, agentctl, ready

    def record_latencies(self) -> None:
        at, lat = self.seen.at, self.figures.latencies
        for name in self.names():
            applied, pod = self.applied[name], pod_name(name)
            lat.setdefault("apply → pod created", []).append(at[(pod, "created")] - applied)
            lat.setdefault("apply → AgentctlReady", []).append(at[(name, "AgentctlReady")] - applied)
            lat.setdefault("apply → Ready", []).append(at[(name, "Ready")] - applied)
            if (pod, "ready") in at:
                lat.setdefault("operator's share: pod Ready → AgentctlReady", []).append(
                    at[(name, "AgentctlReady")] - at[(pod, "ready")]
                )

    async def events_per_session(self) -> float:
        events = (await self.kube.list(EVENTS, self.ns)).items
        mine = [e for e in events if e.get("involvedObject", {}).get("kind") == KIND]
        return len(mine) / (self.n + 1)


async def gateway_figures(
    kubeconfig: str, namespace: str, port: int, n: int, within: float
) -> dict[str, Any]:
    """A real gateway against the namespace: how long until it follows every agent's agentctl, then one
    client's session_state (five connections, one after another)."""
    log = Path(tempfile.mkstemp(prefix="scale-bench-gateway-", suffix=".log")[1])
    started = time.monotonic()
    args = ["--insecure-dev-mode", "--namespace", namespace, "--log-level", "WARNING"]
    args += ["--agentctl-host-override", "127.0.0.1", "--agentctl-port-override", str(port)]
    with gateway_process(kubeconfig, log, *args) as gateway:
        serving = time.monotonic() - started
        deadline = time.monotonic() + within
        while (await standin_stats(port))["open_streams"] < n:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the gateway followed fewer than {n} agents within {within:.0f}s; log: {log}"
                )
            await asyncio.sleep(0.5)
        following = time.monotonic() - started
        times, sizes, agents = [], [], 0
        async with aiohttp.ClientSession() as http:
            for _ in range(5):
                begin = time.perf_counter()
                async with http.ws_connect(gateway.ws_url, max_msg_size=0) as ws:
                    msg = await ws.receive(timeout=60)
                    times.append(time.perf_counter() - begin)
                    sizes.append(len(msg.data))
                    frame = json.loads(msg.data)
                    if frame["type"] != "session_state":
                        raise RuntimeError(
                            f"the gateway's first frame was {frame['type']}, not session_state"
                        )
                    agents = len(frame["payload"]["agents"])
        rss = Usage.of(gateway.proc.pid).rss
        peak = rss_bytes(gateway.proc.pid, "VmHWM") or 0
    return {
        "serving_seconds": serving,
        "following_seconds": following,
        "state_seconds": times,
        "state_bytes": max(sizes),
        "agents": agents,
        "rss": rss,
        "rss_peak": peak,
    }


@dataclass(frozen=True)
class Snapshot:
    """What the operator has used and what the API server has served, at one moment."""

    at: float
    usage: Usage
    api: ApiServerCounters
    operator: dict[str, float]
    control_plane: dict[str, float]  # CPU seconds by process

    @staticmethod
    async def take(pid: int, metrics_url: str) -> Snapshot:
        api = await asyncio.to_thread(ApiServerCounters.read)
        control_plane = await asyncio.to_thread(cpu_by_command, CONTROL_PLANE)
        return Snapshot(
            time.monotonic(), Usage.of(pid), api, await operator_metrics(metrics_url), control_plane
        )


async def run(
    n: int, quiet: float, concurrency: int, settle: float, profile: Path | None, trace_memory: Path | None
) -> None:
    nodes = await asyncio.to_thread(fake_nodes)
    kube = await connect(os.environ.get("KUBECONFIG"))
    namespace = await bench_namespace()
    workdir = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    bench = ScaleBench(kube, namespace, n, concurrency)
    fig = bench.figures
    fig.values["kwok_nodes"] = nodes
    watchers = [asyncio.create_task(watch(kube, r, namespace, bench.seen)) for r in (PODS, AGENT_SESSIONS)]
    agentctl_port, metrics_port = free_port(), free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    operator_flow, gateway_flow = (
        flow_schema_name(namespace, "operator"),
        flow_schema_name(namespace, "gateway"),
    )
    try:
        kubeconfigs = await asyncio.to_thread(chart_identities, namespace, workdir)
        with (
            standin(agentctl_port),
            operator(
                str(kubeconfigs["operator"]),
                namespace,
                [sys.executable, "-m", "benchmarks.traced_operator", str(trace_memory)]
                if trace_memory
                else None,
                agentctl_host_override="127.0.0.1",
                agentctl_port=str(agentctl_port),
                metrics_port=str(metrics_port),
                metrics_host="127.0.0.1",
            ) as proc,
        ):
            await kube.create(bench.manifest("warm-up"))
            await bench.seen.wait("warm-up", "Ready")
            before = await Snapshot.take(proc.pid, metrics_url)
            within = 120 + n * 0.5
            with profiled(proc.pid, profile):
                start, applied, agentctl, ready = await bench.burst(within)
            done = await Snapshot.take(proc.pid, metrics_url)
            bench.record_latencies()
            fig.burst_requests = done.api.requests - before.api.requests
            # At rest: the burst's work is over; what the operator holds and does now is what N sessions cost.
            await asyncio.sleep(settle)
            rest = await Snapshot.take(proc.pid, metrics_url)
            samples = []
            while time.monotonic() - rest.at < quiet:
                await asyncio.sleep(min(5.0, quiet))
                samples.append(Usage.of(proc.pid).rss)
            after = await Snapshot.take(proc.pid, metrics_url)
            if trace_memory is not None:
                await asyncio.to_thread(traced, proc, trace_memory)
            fig.values.update(
                apply_seconds=applied - start,
                agentctl_seconds=agentctl - start,
                ready_seconds=ready - start,
                rss_before=before.usage.rss,
                rss_rest=sorted(samples)[len(samples) // 2],
                rss_peak=rss_bytes(proc.pid, "VmHWM") or 0,
                cpu_burst=done.usage.cpu - before.usage.cpu,
                cpu_quiet=after.usage.cpu - rest.usage.cpu,
                control_plane_burst={
                    name: done.control_plane[name] - before.control_plane.get(name, 0.0)
                    for name in done.control_plane
                },
                burst_reconciles=done.operator["reconciles"] - before.operator["reconciles"],
                burst_reconcile_seconds=done.operator["reconcile_seconds"]
                - before.operator["reconcile_seconds"],
                reconcile_errors=done.operator["reconcile_errors"] - before.operator["reconcile_errors"],
                burst_operator_requests=done.api.by_flow[operator_flow] - before.api.by_flow[operator_flow],
                quiet_seconds=after.at - rest.at,
                quiet_operator_requests=after.api.by_flow[operator_flow] - rest.api.by_flow[operator_flow],
                quiet_reconciles=after.operator["reconciles"] - rest.operator["reconciles"],
                events_posted=after.operator["events"] - before.operator["events"],
                events_per_session=await bench.events_per_session(),
                watches_before=dict(before.api.watches),
                watches_after=dict(after.api.watches),
                standin=await standin_stats(agentctl_port),
            )
            # The operator's figures first: the gateway's part can fail on its own.
            report(fig)
            gateway_before = (await asyncio.to_thread(ApiServerCounters.read)).by_flow[gateway_flow]
            gateway = await gateway_figures(
                str(kubeconfigs["gateway"]), namespace, agentctl_port, n + 1, within
            )
            gateway_after = (await asyncio.to_thread(ApiServerCounters.read)).by_flow[gateway_flow]
            gateway["requests"] = gateway_after - gateway_before
            print(gateway_report(gateway))
    finally:
        for task in watchers:
            task.cancel()
        await kube.close()
        with contextlib.suppress(subprocess.CalledProcessError):
            await asyncio.to_thread(delete_flow_schemas, namespace)
            await asyncio.to_thread(kubectl, "delete", "namespace", namespace, "--wait=false")
        # Thousands of objects take the API server a while to delete; the next run (or test) should not share it.
        gone = time.monotonic()
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            await asyncio.to_thread(
                kubectl, "wait", "--for=delete", f"namespace/{namespace}", "--timeout=600s", timeout=660
            )
        print(f"namespace deleted {time.monotonic() - gone:.0f} s after the run")


def _mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


def _requests_table(counts: Counter[RequestKey], n: int) -> list[str]:
    lines = ["| verb | resource | client | requests | per session |", "|---|---|---|---|---|"]
    for (verb, resource, sub), count in sorted(counts.items(), key=lambda kv: -kv[1]):
        if count / n < 0.05:
            continue  # other clients of the cluster, or once per run
        where = f"{resource}/{sub}" if sub else resource
        lines.append(
            f"| {verb} | {where} | {CLIENTS.get((verb, resource, sub), '')} | {count} | {count / n:.2f} |"
        )
    return lines


def report(fig: Figures) -> None:
    n, v = fig.sessions, fig.values
    print(f"\n{n} sessions at once on {v['kwok_nodes']} kwok nodes, one operator, one stand-in agentctl\n")
    print("| measure | p50 | p90 | p99 | n |\n|---|---|---|---|---|")
    for name, values in fig.latencies.items():
        print(row(name, values))
    print(
        f"\napplied in {v['apply_seconds']:.1f} s ({n / v['apply_seconds']:.1f} sessions/s); "
        f"all AgentctlReady {v['agentctl_seconds']:.1f} s after the first apply "
        f"({n / v['agentctl_seconds']:.1f} sessions/s through the operator), all Ready {v['ready_seconds']:.1f} s "
        f"({n / v['ready_seconds']:.1f} sessions/s)"
    )
    mean = v["burst_reconcile_seconds"] / max(1.0, v["burst_reconciles"])
    print(
        f"reconciles in the burst: {v['burst_reconciles']:.0f} ({v['burst_reconciles'] / n:.1f} per session, "
        f"mean {mean * 1000:.0f} ms, {v['reconcile_errors']:.0f} failed)"
    )
    print(
        f"operator CPU: {v['cpu_burst']:.1f} s for the burst = {v['cpu_burst'] / n * 1000:.1f} s per 1,000 "
        f"sessions; at rest {v['cpu_quiet']:.2f} s in {v['quiet_seconds']:.0f} s"
    )
    if v["control_plane_burst"]:
        busy = ", ".join(f"{name} {cpu:.1f} s" for name, cpu in sorted(v["control_plane_burst"].items()))
        seconds = v["agentctl_seconds"]
        print(
            f"control plane CPU in the burst (processes on this machine): {busy}; "
            f"{sum(v['control_plane_burst'].values()) / seconds:.2f} CPUs over its {seconds:.0f} s, "
            f"the operator {v['cpu_burst'] / seconds:.2f}"
        )
    grown = v["rss_rest"] - v["rss_before"]
    print(
        f"operator RSS: {_mib(v['rss_before'])} before the burst, {_mib(v['rss_rest'])} at rest after it "
        f"({grown / n / 1024:.1f} KiB per session), peak {_mib(v['rss_peak'])}"
    )
    print(
        f"operator API requests: {v['burst_operator_requests']} in the burst ({v['burst_operator_requests'] / n:.1f} "
        f"per session); at rest {v['quiet_operator_requests']} in {v['quiet_seconds']:.0f} s = "
        f"{v['quiet_operator_requests'] / n / (v['quiet_seconds'] / 60):.4f} per session per minute "
        f"({v['quiet_reconciles']:.0f} reconciles)"
    )
    print(
        f"Events: {v['events_per_session']:.1f} per session in the namespace "
        f"({v['events_posted']:.0f} posted by the operator)"
    )
    print(
        f"API server's open watches (kinds of a session): before {v['watches_before']}, after {v['watches_after']}"
    )
    print(f"stand-in agentctl: {v['standin']}")
    print(
        f"\nAPI requests during the burst, cluster-wide, rows of at least 0.05 per session ({n} sessions):\n"
    )
    print("\n".join(_requests_table(fig.burst_requests, n)))


def gateway_report(g: dict[str, Any]) -> str:
    times = g["state_seconds"]
    return (
        f"\ngateway with {g['agents']} agents: /readyz after {g['serving_seconds']:.1f} s, following every "
        f"agentctl after {g['following_seconds']:.1f} s ({g['requests']} API requests); session_state "
        f"{g['state_bytes'] / 1024:.0f} KiB ({g['state_bytes'] / g['agents']:.0f} bytes per agent) in p50 "
        f"{percentile(times, 50) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms; gateway RSS {_mib(g['rss'])} (peak {_mib(g['rss_peak'])})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000, help="sessions applied at once")
    parser.add_argument(
        "--concurrency", type=int, default=50, help="create requests in flight while applying"
    )
    parser.add_argument("--settle-seconds", type=float, default=20.0, help="pause after the burst")
    parser.add_argument(
        "--quiet-seconds", type=float, default=60.0, help="the window at rest that is counted"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy's samples of the operator during the burst (collapsed stacks) to this file",
    )
    parser.add_argument(
        "--trace-memory",
        type=Path,
        help="run the operator under tracemalloc (slower) and write its allocations at rest to this file",
    )
    args = parser.parse_args(argv)
    if fake_nodes() == 0:
        print(
            "scale_bench: no Ready kwok node (label type=kwok) in the cluster; start them with "
            "hack/cluster/kwok.sh up --nodes 10, or run make scale",
            file=sys.stderr,
        )
        return 2
    asyncio.run(
        run(
            args.sessions,
            args.quiet_seconds,
            args.concurrency,
            args.settle_seconds,
            args.profile,
            args.trace_memory,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
