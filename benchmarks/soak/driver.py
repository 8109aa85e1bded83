"""The soak run: its own operator and gateway processes, `sessions` slots each churning one session at a time, the
invariants checked on a snapshot of the namespace every `check_seconds`, and memory sampled every
`sample_seconds`.

Everything happens in a namespace of its own, served only by this run's operator, and deleted at the end. When the
time is up no slot starts another cycle; the run waits for the running ones to finish and for the namespace to
hold no session and no child of one, then checks once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from tests.support.gateway import Client, GatewayProcess, gateway_process
from tests.support.processes import OperatorProcess, operator_process

from agentsession.kube.client import ApiKube, connect
from agentsession.kube.errors import KubeError
from agentsession.kube.ops import decode_token
from agentsession.kube.resources import AGENT_SESSIONS, CLAIMS, PODS, SECRETS
from agentsession.tasks import Supervisor
from benchmarks.procfs import agentctl_pids, rss_bytes
from benchmarks.soak.cycle import Cycle, CycleFailed, draw_plan
from benchmarks.soak.invariants import Bounds, Invariants, Snapshot, Violation, children, owner_uid
from benchmarks.soak.memory import Sample
from benchmarks.startup_bench import bench_namespace, kubectl

log = logging.getLogger("soak")
DIALECT = "agent-lifecycle.v1"
CLEANUP_WITHIN = 90.0
# After the API server answers again, the controllers (the garbage collector, the operator's watches) catch up:
# the invariants' clocks start again this long after.
OUTAGE_GRACE = 30.0


@dataclass(frozen=True)
class SoakConfig:
    kubeconfig: str
    minutes: float = 30.0
    sessions: int = 6  # slots, so at most this many sessions (and pods) at once
    seed: int = 1
    check_seconds: float = 1.0
    sample_seconds: float = 10.0
    image: str = "agentsession:dev"
    out_dir: Path = Path("build/soak")
    bounds: Bounds = field(default_factory=Bounds)


@dataclass
class SoakResult:
    namespace: str = ""
    seconds: float = 0.0
    cycles: int = 0  # sessions that went through the whole cycle
    failed_cycles: int = 0
    prompts: int = 0  # sent through the gateway and answered
    violations: list[Violation] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    load: list[tuple[float, float]] = field(default_factory=list)  # (seconds, 1-minute load average)
    longest: dict[str, float] = field(default_factory=dict)  # per rule, the longest its bad condition lasted
    outages: list[tuple[float, float]] = field(default_factory=list)  # (seconds, how long) the API was away


class Soak:
    """The run's shared state: what cycles wait on (snapshots), what they count, and what they break."""

    def __init__(
        self,
        config: SoakConfig,
        kube: ApiKube,
        namespace: str,
        http: aiohttp.ClientSession,
        operator: OperatorProcess,
        gateway: GatewayProcess,
    ) -> None:
        self.config = config
        self.kube = kube
        self.namespace = namespace
        self.http = http
        self.operator = operator
        self.gateway = gateway
        self.result = SoakResult(namespace=namespace)
        self.invariants = Invariants(config.bounds)
        self.snapshot: Snapshot | None = None
        self.gateway_view: dict[str, str] = {}
        self.broken: str | None = None  # why the run stopped early: a process of it died
        self._outage_since: float | None = None  # when the API server stopped answering
        self._fresh = asyncio.Condition()
        self._started = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._started

    def record(self, invariant: str, subject: str, detail: str) -> None:
        violation = Violation(self.now(), invariant, subject, detail)
        self.result.violations.append(violation)
        log.error("violation: %s", violation.line())

    # --- what cycles use (cycle.Context) ---

    async def until(self, what: str, probe: Callable[[Snapshot], bool], within: float) -> Snapshot:
        deadline = time.monotonic() + within
        async with self._fresh:
            while True:
                if self.broken:
                    raise CycleFailed("cycle", f"waiting for {what}: the run stopped: {self.broken}")
                if self.snapshot is not None and probe(self.snapshot):
                    return self.snapshot
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CycleFailed("cycle", f"no {what} within {within:.0f}s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._fresh.wait(), remaining)

    async def connect(self) -> Client:
        ws = await self.http.ws_connect(self.gateway.ws_url, protocols=(DIALECT,), heartbeat=20)
        return Client(ws)

    async def pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def prompted(self) -> None:
        self.result.prompts += 1

    def check_frames(self, client: Client, subject: str) -> None:
        """Every error frame is a violation: the run sends nothing the gateway should refuse."""
        for frame in client.frames:
            if frame.get("type") == "error":
                self.record("error-frame", subject, json.dumps(frame.get("payload"))[:300])

    # --- the loops ---

    async def run(self) -> SoakResult:
        observer = await self.connect()
        loops = Supervisor("soak", log)
        loops.spawn(self._check_loop(observer), "invariants")
        loops.spawn(self._sample_loop(), "memory")
        try:
            await self.until("a first snapshot", lambda _: True, 60)
            deadline = time.monotonic() + self.config.minutes * 60
            await asyncio.gather(*(self._slot(i, deadline) for i in range(self.config.sessions)))
            try:
                await self.until("the namespace without sessions or their children", _empty, CLEANUP_WITHIN)
                await self._fresh_snapshot()
            except CycleFailed as failed:
                self.record("leftovers", self.namespace, failed.detail)
            self.result.longest = dict(self.invariants.longest)
        finally:
            await loops.close()
            await observer.close()
            self.result.seconds = self.now()
        return self.result

    async def _slot(self, index: int, deadline: float) -> None:
        # A generator per slot: a slot's choices do not depend on how the slots interleave.
        rng = random.Random(f"{self.config.seed}/{index}")
        await asyncio.sleep(rng.uniform(0, 3))
        n = 0
        while time.monotonic() < deadline and not self.broken:
            plan = draw_plan(rng, f"soak-{index}-{n}")
            n += 1
            cycle = Cycle(self, plan)
            began = time.monotonic()
            try:
                await cycle.run()
                self.result.cycles += 1
                log.info("%s: whole cycle in %.1fs", plan.name, time.monotonic() - began)
                continue
            except CycleFailed as failed:
                self.record(failed.invariant, plan.name, failed.detail)
            except (AssertionError, KubeError, aiohttp.ClientError, TimeoutError) as error:
                self.record("cycle", plan.name, f"{type(error).__name__}: {error}"[:2000])
            self.result.failed_cycles += 1
            try:
                await cycle.delete_and_wait()
            except (CycleFailed, KubeError) as error:
                self.record("cycle", plan.name, f"cleaning up: {error}")

    async def _check_loop(self, observer: Client) -> None:
        while True:
            for name, running in (("operator", self.operator.proc), ("gateway", self.gateway.proc)):
                if running.poll() is not None and not self.broken:
                    self.broken = f"the {name} exited with {running.returncode}"
                    self.record("process", name, f"exited with {running.returncode}; see its log")
            self._read_observer(observer)
            try:
                snap = await self._take_snapshot()
            except KubeError as error:
                if self._outage_since is None:
                    self._outage_since = self.now()
                    log.warning("the API server does not answer; the invariants' clocks stop: %s", error)
            else:
                if self._outage_since is not None:
                    self.result.outages.append((self._outage_since, snap.at - self._outage_since))
                    log.warning("the API server answers again after %.0fs", snap.at - self._outage_since)
                    self.invariants.excuse(snap.at + OUTAGE_GRACE)
                    self._outage_since = None
                for violation in self.invariants.check(snap):
                    self.result.violations.append(violation)
                    log.error("violation: %s", violation.line())
                async with self._fresh:
                    self.snapshot = snap
                    self._fresh.notify_all()
            await asyncio.sleep(self.config.check_seconds)

    async def _fresh_snapshot(self) -> None:
        """Waits for a snapshot taken after this moment, so the last check sees the end state."""
        asked = self.now()
        await self.until("a last snapshot", lambda snap: snap.at > asked, 60)

    def _read_observer(self, observer: Client) -> None:
        frames, observer.frames[:] = list(observer.frames), []
        for frame in frames:
            kind, payload = frame.get("type"), frame.get("payload") or {}
            if kind == "session_state":
                self.gateway_view = {a["id"]: a["status"] for a in payload.get("agents", [])}
            elif kind == "agent_status":
                self.gateway_view[payload["agentId"]] = payload["status"]
            elif kind == "error":
                self.record("error-frame", "observer", json.dumps(payload)[:300])
        if observer.closed_code is not None and not self.broken:
            self.broken = f"the gateway closed the observer's connection ({observer.closed_code})"
            self.record("process", "gateway", self.broken)

    async def _take_snapshot(self) -> Snapshot:
        at = self.now()
        sessions, pods, secrets, claims = await asyncio.gather(
            *(self.kube.list(r, self.namespace) for r in (AGENT_SESSIONS, PODS, SECRETS, CLAIMS))
        )
        return Snapshot(at, sessions.items, pods.items, secrets.items, claims.items, dict(self.gateway_view))

    async def _sample_loop(self) -> None:
        while True:
            await asyncio.to_thread(self._sample)
            await asyncio.sleep(self.config.sample_seconds)

    def _sample(self) -> None:
        at = self.now()
        samples = self.result.samples
        for name, proc in (("operator", self.operator.proc), ("gateway", self.gateway.proc)):
            rss = rss_bytes(proc.pid)
            if rss is not None:
                samples.append(Sample(at, name, str(proc.pid), rss))
        snap = self.snapshot
        if snap is not None:
            sessions = {s["metadata"]["uid"]: s["metadata"]["name"] for s in snap.sessions}
            tokens = {
                decode_token(secret): sessions[uid]
                for secret in snap.secrets
                if (uid := owner_uid(secret)) in sessions
            }
            for token, pid in agentctl_pids(tokens).items():
                rss = rss_bytes(pid)
                if rss is not None:
                    samples.append(Sample(at, "agentctl", f"{tokens[token]}/{pid}", rss))
        self.result.load.append((at, os.getloadavg()[0]))


def _empty(snap: Snapshot) -> bool:
    return not snap.sessions and not any(owner_uid(c) for _, c in children(snap))


async def _remove_sessions(kube: ApiKube, namespace: str) -> None:
    """What a cut-short run leaves: deleted while its operator still runs, so the finalizers come off."""
    listing = await kube.list(AGENT_SESSIONS, namespace)
    for body in listing.items:
        with contextlib.suppress(KubeError):
            await kube.delete(AGENT_SESSIONS, namespace, body["metadata"]["name"])
    for _ in range(int(CLEANUP_WITHIN)):
        if not (await kube.list(AGENT_SESSIONS, namespace)).items:
            return
        await asyncio.sleep(1)


async def run(config: SoakConfig) -> SoakResult:
    config.out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("operator.log", "gateway.log"):
        (config.out_dir / name).unlink(missing_ok=True)
    namespace = await bench_namespace()
    kube = await connect(config.kubeconfig)
    try:
        with (
            operator_process(
                config.kubeconfig,
                config.out_dir / "operator.log",
                namespaces=json.dumps([namespace]),
                image=config.image,
                image_pull_policy="IfNotPresent",
            ) as operator,
            gateway_process(
                config.kubeconfig,
                config.out_dir / "gateway.log",
                "--namespace",
                namespace,
                "--insecure-dev-mode",
            ) as gateway,
        ):
            try:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
                    return await Soak(config, kube, namespace, http, operator, gateway).run()
            finally:
                await _remove_sessions(kube, namespace)
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            await asyncio.to_thread(kubectl, "delete", "namespace", namespace, "--wait=false")
        await kube.close()
