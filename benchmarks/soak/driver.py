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
from agentsession.kube.errors import KubeError, KubeUnavailable
from agentsession.kube.ops import decode_token
from agentsession.kube.resources import AGENT_SESSIONS, CLAIMS, PODS, SECRETS
from agentsession.tasks import Supervisor
from benchmarks.procfs import agentctl_pids, rss_bytes
from benchmarks.soak.cycle import Cycle, CycleFailed, draw_plan
from benchmarks.soak.invariants import Bounds, Invariants, Snapshot, Violation, children, owner_uid
from benchmarks.soak.memory import CsvLog, Sample
from benchmarks.startup_bench import bench_namespace, kubectl

log = logging.getLogger("soak")
DIALECT = "agent-lifecycle.v1"
CLEANUP_WITHIN = 90.0
# After the API server answers again, the controllers catch up: the operator's watches, and the garbage collector,
# which took up to a minute to remove the children of sessions deleted around a restart of the API server.
# The invariants' clocks start again this long after.
OUTAGE_GRACE = 60.0
OUTAGE_WAIT = 300.0  # how long a slot waits for the API server to answer again
CLEANUP_ATTEMPTS = 5


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
    failed_cycles: int = 0  # cut short: by a violation, or by an outage of the API server
    prompts: int = 0  # sent through the gateway and answered
    violations: list[Violation] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    load: list[tuple[float, float]] = field(default_factory=list)  # (seconds, 1-minute load average)
    longest: dict[str, float] = field(default_factory=dict)  # per rule, the longest its bad condition lasted
    outages: list[tuple[float, float]] = field(default_factory=list)  # (seconds, how long) the API was away
    # Cycles that failed while the API server was away (or within the grace after): what failed, not judged.
    cut_short: list[str] = field(default_factory=list)


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
        self.csv = CsvLog(config.out_dir / "memory.csv")
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
                await self.until("an empty namespace", _empty, CLEANUP_WITHIN)
                # One more check, on a snapshot of the end state.
                await self._until_api_answers()
            except CycleFailed as failed:
                left = _leftovers(self.snapshot) if self.snapshot else "nothing listed"
                self.record("leftovers", self.namespace, f"{failed.detail}; left: {left}")
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
            began = self.now()
            try:
                await cycle.run()
                self.result.cycles += 1
                log.info("%s: whole cycle in %.1fs", plan.name, self.now() - began)
                continue
            except CycleFailed as failed:
                problems, api_failed = [(failed.invariant, failed.detail)], False
            except (AssertionError, KubeError, aiohttp.ClientError, TimeoutError) as error:
                problems = [("cycle", f"{type(error).__name__}: {error}"[:2000])]
                api_failed = isinstance(error, KubeError) and api_away(error)
            if cycle.error_frames and problems[0][0] != "error-frame":
                problems.append(("error-frame", "; ".join(cycle.error_frames)))
            self.result.failed_cycles += 1
            await self._clean_up(cycle)
            if api_failed or self._outage_since is not None or self._outage_after(began):
                self.result.cut_short.append(f"{plan.name}: {problems[0][1]}"[:300])
                log.warning("%s cut short by an API server outage: %s", plan.name, problems[0][1][:300])
            else:
                for invariant, detail in problems:
                    self.record(invariant, plan.name, detail)

    async def _clean_up(self, cycle: Cycle) -> None:
        """Deletes what a cut-short cycle left, trying again after an outage of the API server."""
        for _ in range(CLEANUP_ATTEMPTS):
            try:
                await cycle.delete_and_wait()
                return
            except KubeError as error:
                if not api_away(error):
                    self.record("cycle", cycle.name, f"cleaning up: {error}")
                    return
            except CycleFailed as failed:
                self.record("cycle", cycle.name, f"cleaning up: {failed.detail}")
                return
            await self._until_api_answers()
        self.record(
            "cycle", cycle.name, f"cleaning up: the API server did not answer in {CLEANUP_ATTEMPTS} tries"
        )

    def _outage_after(self, began: float) -> bool:
        """Whether an outage of the API server (and its grace) overlapped the time since `began`."""
        return any(at + lasted + OUTAGE_GRACE >= began for at, lasted in self.result.outages)

    async def _until_api_answers(self) -> None:
        """Until a snapshot taken from now on: the API server answers, and an outage, if any, is on record."""
        asked = self.now()
        with contextlib.suppress(CycleFailed):
            await self.until("the API server answering", lambda snap: snap.at > asked, OUTAGE_WAIT)

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
        samples: list[Sample] = []
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
        self.result.samples += samples
        self.csv.append(samples)
        self.result.load.append((at, os.getloadavg()[0]))


def api_away(error: KubeError) -> bool:
    """No answer, or the API server's own failure (503 while it starts): not a refusal of the request."""
    return isinstance(error, KubeUnavailable) or (error.status or 0) >= 500


def _leftovers(snap: Snapshot) -> str:
    """The sessions and their children a snapshot still shows."""
    names = [f"AgentSession {s['metadata']['name']}" for s in snap.sessions]
    names += [f"{kind} {c['metadata']['name']}" for kind, c in children(snap) if owner_uid(c)]
    return ", ".join(names)


def _empty(snap: Snapshot) -> bool:
    return not _leftovers(snap)


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
