"""Startup and stop on a real cluster: a bare pod of the operator's pod shape against an AgentSession.

Needs a cluster with a node and the project image (`make cluster-up image`); it starts its own operator process
from this checkout, watching only the benchmark's namespace, and deletes that namespace at the end.

Every instant is this process's monotonic clock when its watch delivered the change (pods and AgentSessions of the
namespace), so the kubelet's and the API server's latencies count the same for both shapes. Runs are interleaved
(bare, session, bare, session, ...) so that a change in the machine's load hits both alike.

- create → agentctl ready (the sidecar's `ready`) → pod Ready, for both; → `AgentctlReady` and `Ready` for sessions;
- the operator's share: `AgentctlReady=True` seen minus the pod's agentctl `ready` seen, sequential and in a burst;
- agentctl's own start → ready: from its process's start (read in /proc: only where the node is this machine);
- stop: delete (bare pod) or suspend (session) → pod gone, an idle agent in both.

`python -m benchmarks.startup_bench [--runs N] [--burst N]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.release_key import key_file

from agentsession.api.constants import API_VERSION, KIND, TOKEN_KEY, pod_name, token_secret_name
from agentsession.api.models import AgentSessionSpec
from agentsession.api.session_ref import SessionRef
from agentsession.controller.config import OperatorConfig
from agentsession.controller.pod_builder import build_pod
from agentsession.kube.client import ApiKube, connect
from agentsession.kube.errors import Gone
from agentsession.kube.resources import AGENT_SESSIONS, PODS, Resource

BIN = Path(sys.executable).parent
CRDS = sorted((Path(__file__).resolve().parent.parent / "crds").glob("*.yaml"))
IMAGE = os.environ.get("AGENTSESSION_IMAGE", "agentsession:dev")
WAIT = 180.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def kubectl(*args: str, timeout: float = 60) -> str:
    """kubectl's output; CalledProcessError (with kubectl's stderr) when it fails."""
    done = subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True, timeout=timeout)
    return done.stdout


def percentile(values: list[float], p: float) -> float:
    """Nearest rank: with few runs the p99 is the worst run, not an interpolation past it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def row(name: str, values: list[float], unit: str = "s") -> str:
    if not values:
        return f"| {name} | no data | | | |"
    cells = [f"{percentile(values, p):.3f} {unit}" for p in (50, 90, 99)]
    return f"| {name} | {' | '.join(cells)} | {len(values)} |"


class Seen:
    """The first moment each milestone of each object was delivered by a watch."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, str], float] = {}
        self._changed = asyncio.Condition()

    async def mark(self, name: str, milestone: str) -> None:
        async with self._changed:
            self.at.setdefault((name, milestone), time.monotonic())
            self._changed.notify_all()

    async def wait(self, name: str, milestone: str) -> float:
        async with self._changed, asyncio.timeout(WAIT):
            await self._changed.wait_for(lambda: (name, milestone) in self.at)
        return self.at[(name, milestone)]


def _agentctl_ready(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("initContainerStatuses") or []
    return any(s.get("name") == "agentctl" and s.get("ready") for s in statuses)


def _true(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in obj.get("status", {}).get("conditions") or []
    )


async def _mark(resource: Resource, kind: str, obj: dict[str, Any], seen: Seen) -> None:
    name = obj.get("metadata", {}).get("name", "")
    if kind == "DELETED":
        await seen.mark(name, "deleted")
    elif resource is PODS:
        await seen.mark(name, "created")
        if _agentctl_ready(obj):
            await seen.mark(name, "agentctl_ready")
        if _true(obj, "Ready"):
            await seen.mark(name, "ready")
    else:
        for condition in ("AgentctlReady", "Ready"):
            if _true(obj, condition):
                await seen.mark(name, condition)


async def watch(kube: ApiKube, resource: Resource, namespace: str, seen: Seen) -> None:
    while True:
        listing = await kube.list(resource, namespace)
        for obj in listing.items:
            await _mark(resource, "ADDED", obj, seen)
        version = listing.resource_version
        # A long run (thousands of objects) can outlast the API server's watch history: list again then.
        with contextlib.suppress(Gone):
            while True:
                async for event in kube.watch(
                    resource, namespace, resource_version=version, timeout_seconds=300, inactivity_timeout=330
                ):
                    version = event.object.get("metadata", {}).get("resourceVersion", version)
                    if event.type != "BOOKMARK":
                        await _mark(resource, event.type, event.object, seen)


def agentctl_started(token: str) -> float | None:
    """When the agentctl process holding `token` started, on this process's monotonic clock (both count from
    boot); None where the node's processes are not visible here."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if f"AGENTCTL_TOKEN={token}".encode() in environ.split(b"\0"):
            return int(stat.rsplit(")", 1)[1].split()[19]) / CLOCK_TICKS
    return None


async def read_token(kube: ApiKube, namespace: str, name: str) -> str:
    import base64

    secret = await kube.get(Resource("Secret", "secrets"), namespace, token_secret_name(name))
    return base64.b64decode(secret["data"][TOKEN_KEY]).decode()


class Bench:
    def __init__(self, kube: ApiKube, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.seen = Seen()
        self.results: dict[str, list[float]] = defaultdict(list)

    def record(self, name: str, value: float | None) -> None:
        if value is not None:
            self.results[name].append(value)

    async def agentctl_start_to_ready(self, name: str, token: str, ready_at: float) -> None:
        started = await asyncio.to_thread(agentctl_started, token)
        self.record("agentctl process start → agentctl ready", ready_at - started if started else None)

    async def bare(self, i: int) -> None:
        name, token = f"bare-{i}", uuid.uuid4().hex
        ref = SessionRef(self.ns, name, str(uuid.uuid4()))
        pod = build_pod(
            ref, AgentSessionSpec(), OperatorConfig(image=IMAGE, image_pull_policy="IfNotPresent")
        )
        # No owner (the garbage collector would delete a pod whose owner does not exist) and none of the
        # operator's labels (it would look for the session).
        pod["metadata"] = {"name": pod_name(name), "namespace": self.ns}
        secret_name = token_secret_name(name)
        # Timed from the Secret, as the session is: the operator creates the Secret before the pod too.
        created = time.monotonic()
        await self.kube.create(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret_name, "namespace": self.ns},
             "stringData": {TOKEN_KEY: token}}
        )  # fmt: skip
        await self.kube.create(pod)
        agentctl = await self.seen.wait(pod_name(name), "agentctl_ready")
        ready = await self.seen.wait(pod_name(name), "ready")
        await self.agentctl_start_to_ready(name, token, agentctl)
        self.record("bare pod: create → agentctl ready", agentctl - created)
        self.record("bare pod: create → pod Ready", ready - created)
        deleting = time.monotonic()
        await self.kube.delete(PODS, self.ns, pod_name(name))
        self.record("bare pod: delete → pod gone", await self.seen.wait(pod_name(name), "deleted") - deleting)

    async def session(self, name: str, *, stop: bool = True) -> None:
        created = time.monotonic()
        await self.kube.create(
            {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": self.ns},
             "spec": {"agent": {"type": "demo"}}}
        )  # fmt: skip
        pod_created = await self.seen.wait(pod_name(name), "created")
        pod_agentctl = await self.seen.wait(pod_name(name), "agentctl_ready")
        written = await self.seen.wait(name, "AgentctlReady")
        ready = await self.seen.wait(name, "Ready")
        pod_ready = await self.seen.wait(pod_name(name), "ready")
        token = await read_token(self.kube, self.ns, name)
        await self.agentctl_start_to_ready(name, token, pod_agentctl)
        prefix = "session" if stop else "burst"
        self.record(
            f"{prefix}: create → pod created (the operator's share before the pod)", pod_created - created
        )
        self.record(f"{prefix}: create → pod's agentctl ready", pod_agentctl - created)
        self.record(f"{prefix}: create → pod Ready", pod_ready - created)
        self.record(f"{prefix}: create → AgentctlReady", written - created)
        self.record(f"{prefix}: create → Ready", ready - created)
        self.record(
            f"{prefix}: operator's share (pod's agentctl ready → AgentctlReady)", written - pod_agentctl
        )
        if stop:
            suspending = time.monotonic()
            await self.kube.patch(AGENT_SESSIONS, self.ns, name, {"spec": {"suspend": True}})
            gone = await self.seen.wait(pod_name(name), "deleted")
            self.record("session: suspend → pod gone", gone - suspending)
            await self.kube.delete(AGENT_SESSIONS, self.ns, name)


@contextlib.contextmanager
def operator(
    kubeconfig: str | None, namespace: str, command: list[str] | None = None, **settings: str
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator of this checkout, serving `namespace` only; `settings` become AGENTSESSION_* variables.
    `command` runs it another way (e.g. under a profiler)."""
    env = {
        **os.environ,
        "AGENTSESSION_NAMESPACES": f'["{namespace}"]',
        "AGENTSESSION_IMAGE": IMAGE,
        "AGENTSESSION_IMAGE_PULL_POLICY": "IfNotPresent",
        "AGENTSESSION_METRICS_PORT": "0",
        "AGENTSESSION_LIVENESS_PORT": "0",
        "AGENTSESSION_LOG_FORMAT": "json",
        "AGENTSESSION_AGENTCTL_KEY_FILE": str(key_file()),
        **{f"AGENTSESSION_{key.upper()}": value for key, value in settings.items()},
    }
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    with tempfile.NamedTemporaryFile(
        "wb", prefix="startup-bench-operator-", suffix=".log", delete=False
    ) as log:
        proc = subprocess.Popen(
            command or [str(BIN / "agentsession-operator")], stdout=log, stderr=subprocess.STDOUT, env=env
        )
    print(f"operator log: {log.name}", flush=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


async def bench_namespace() -> str:
    """Installs the CRDs and makes a namespace of its own for one benchmark run."""
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    # The project's client serves the kinds the operator uses; CRDs and a namespace are kubectl's job here.
    for crd in CRDS:
        await asyncio.to_thread(kubectl, "apply", "--server-side", "-f", str(crd))
    await asyncio.to_thread(kubectl, "wait", "--for=condition=Established", "crd", "--all")
    await asyncio.to_thread(kubectl, "create", "namespace", namespace)
    return namespace


async def run(runs: int, burst: int) -> Bench:
    kube = await connect(os.environ.get("KUBECONFIG"))
    namespace = await bench_namespace()
    bench = Bench(kube, namespace)
    watchers = [asyncio.create_task(watch(kube, r, namespace, bench.seen)) for r in (PODS, AGENT_SESSIONS)]
    try:
        with operator(os.environ.get("KUBECONFIG"), namespace):
            # A first session warms the operator up (its watches, the image in the page cache); not counted.
            await bench.session("warm-up")
            bench.results.clear()
            for i in range(runs):
                await bench.bare(i)
                await bench.session(f"seq-{i}")
            await asyncio.gather(*(bench.session(f"burst-{i}", stop=False) for i in range(burst)))
    finally:
        for task in watchers:
            task.cancel()
        with contextlib.suppress(subprocess.CalledProcessError):
            await asyncio.to_thread(kubectl, "delete", "namespace", namespace, "--wait=false")
        await kube.close()
    return bench


def report(bench: Bench, runs: int, burst: int) -> None:
    r = bench.results
    print(f"\n{runs} interleaved runs of each shape, then a burst of {burst} sessions; times in seconds\n")
    print("| measure | p50 | p90 | p99 | n |\n|---|---|---|---|---|")
    for name in sorted(r, key=lambda n: (n.split(":")[0], n)):
        print(row(name, r[name]))
    bare = r.get("bare pod: create → pod Ready")
    session = r.get("session: create → Ready")
    if bare and session:
        ratio = percentile(session, 50) / percentile(bare, 50)
        print(f"\napply → Ready against the bare pod's Ready, p50: {ratio:.2f}x")
    share = r.get("session: operator's share (pod's agentctl ready → AgentctlReady)")
    if share:
        print(f"operator's share, sequential: p50 {percentile(share, 50) * 1000:.0f} ms, "
              f"p99 {percentile(share, 99) * 1000:.0f} ms")  # fmt: skip
    burst_share = r.get("burst: operator's share (pod's agentctl ready → AgentctlReady)")
    if burst_share:
        print(f"operator's share, burst of {burst}: p50 {percentile(burst_share, 50) * 1000:.0f} ms, "
              f"p99 {percentile(burst_share, 99) * 1000:.0f} ms")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="interleaved runs of each shape")
    parser.add_argument("--burst", type=int, default=10, help="sessions created at once")
    args = parser.parse_args(argv)
    bench = asyncio.run(run(args.runs, args.burst))
    report(bench, args.runs, args.burst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
