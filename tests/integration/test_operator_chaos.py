"""The operator killed (SIGKILL) at random points of a burst of creations, suspends, resumes and deletes: once the
last one has converged, every session is what its spec asks for, with exactly its children, nothing orphaned and
no finalizer left behind. Nothing lost, nothing duplicated, nothing stuck.

The schedule is drawn from a seed, printed at the start; `AGENTSESSION_CHAOS_SEED=<seed>` replays it. Pods are
pinned to no node, so this needs an API server (and the controller-manager's garbage collector, which the local
cluster runs in both of its tiers), not a kubelet.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from agentsession.api.constants import pod_name, token_secret_name, workspace_claim_name
from tests.conftest import wait_until
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import OperatorProcess, operator_process

# The burst takes 20 to 80 s (most of it six operator start-ups), convergence a few seconds.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

NAMES = tuple(f"s{i}" for i in range(10))
STEPS = 40
KILLS = 5
# The most operations run while the operator is dead, before it is started again.
MAX_WHILE_DEAD = 3
CONVERGENCE_SECONDS = 60


@dataclass
class Intent:
    """What the test last asked of one session name."""

    exists: bool = False
    suspended: bool = False
    persistent: bool = False


@dataclass(frozen=True)
class Step:
    action: str  # create | recreate | suspend | resume | delete | kill | start
    name: str = ""
    pause: float = 0.0  # seconds before the step, so kills land in the middle of reconciles
    suspended: bool = False  # for (re)create
    persistent: bool = False  # for (re)create: a workspace claim


@dataclass
class Schedule:
    steps: list[Step] = field(default_factory=list)
    final: dict[str, Intent] = field(default_factory=dict)


def draw_schedule(rng: random.Random) -> Schedule:
    """A random burst of session operations on NAMES, with KILLS kill/start pairs among them."""
    intents = {name: Intent() for name in NAMES}
    ops: list[Step] = []
    for _ in range(STEPS):
        name = rng.choice(NAMES)
        intent = intents[name]
        pause = rng.uniform(0.0, 0.3)
        roll = rng.random()
        if not intent.exists or roll < 0.15:
            # A name that exists is deleted and created again at once ("recreate"): its older children linger.
            action = "create" if not intent.exists else "recreate"
            step = Step(action, name, pause, rng.random() < 0.3, rng.random() < 0.5)
            intents[name] = Intent(True, step.suspended, step.persistent)
        elif roll < 0.45:
            step = Step("delete", name, pause)
            intents[name] = Intent()
        else:
            step = Step("resume" if intent.suspended else "suspend", name, pause)
            intent.suspended = not intent.suspended
        ops.append(step)
    steps: list[Step] = []
    kills = set(rng.sample(range(2, STEPS), KILLS))
    dead, restart_at = False, 0
    for i, op in enumerate(ops):
        if i in kills:
            if dead:
                steps.append(Step("start"))
            steps.append(Step("kill", pause=rng.uniform(0.0, 1.0)))
            dead, restart_at = True, i + rng.randint(0, MAX_WHILE_DEAD)
        if dead and i == restart_at:
            steps.append(Step("start"))
            dead = False
        steps.append(op)
    if dead:
        steps.append(Step("start"))
    return Schedule(steps, intents)


class Operators:
    """The operator process of the moment, killed and started again as the schedule says."""

    def __init__(self, kubeconfig: str, logs: Path, namespaces: str) -> None:
        self._kubeconfig, self._logs, self._namespaces = kubeconfig, logs, namespaces
        self._cm: AbstractContextManager[OperatorProcess] | None = None
        self._running: OperatorProcess | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self._cm = operator_process(
            self._kubeconfig, self._logs / f"operator-{self.starts}.log", namespaces=self._namespaces
        )
        self._running = self._cm.__enter__()

    def kill(self) -> None:
        assert self._running is not None
        assert self._cm is not None
        self._running.kill()
        self._cm.__exit__(None, None, None)
        self._cm = self._running = None

    def stop(self) -> None:
        if self._cm is not None:
            self._cm.__exit__(None, None, None)
            self._cm = self._running = None


def perform(sessions: Sessions, step: Step) -> None:
    if step.action in ("delete", "recreate"):
        sessions.delete(step.name)
    if step.action in ("create", "recreate"):
        spec: dict[str, Any] = {"suspend": step.suspended, "podTemplate": {"nodeSelector": NOWHERE}}
        if step.persistent:
            spec["workspace"] = {"size": "10Mi"}
        # The operator puts no finalizer on sessions: the name of one deleted a moment ago is free at once.
        sessions.create(step.name, spec)
    elif step.action in ("suspend", "resume"):
        sessions.patch_spec(step.name, {"suspend": step.action == "suspend"})


def _owner_uids(obj: Any) -> set[str]:
    return {ref.uid for ref in obj.metadata.owner_references or [] if ref.kind == "AgentSession"}


def problems(sessions: Sessions, final: dict[str, Intent]) -> list[str]:
    """Every way the namespace differs from what the schedule asked; empty once it has converged."""
    ns, core = sessions.namespace, sessions.core
    found: list[str] = []
    live: dict[str, dict[str, Any]] = {}
    for name, intent in final.items():
        try:
            body = sessions.get(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            if intent.exists:
                found.append(f"{name}: lost (asked for, does not exist)")
            continue
        if not intent.exists:
            meta = body["metadata"]
            found.append(f"{name}: deleted but still there (finalizers {meta.get('finalizers')}, "
                         f"deletionTimestamp {meta.get('deletionTimestamp')})")  # fmt: skip
            continue
        live[body["metadata"]["uid"]] = body
        found += _status_problems(name, intent, body)

    children = {
        "pod": core.list_namespaced_pod(ns).items,
        "secret": core.list_namespaced_secret(ns).items,
        "claim": core.list_namespaced_persistent_volume_claim(ns).items,
    }
    for kind, items in children.items():
        for obj in items:
            owners = _owner_uids(obj)
            if not owners & set(live):
                found.append(f"orphan {kind} {obj.metadata.name} (owners {sorted(owners) or 'none'})")
    for uid, body in live.items():
        name, intent = body["metadata"]["name"], final[body["metadata"]["name"]]
        mine = {kind: [o for o in items if uid in _owner_uids(o)] for kind, items in children.items()}
        expected = {
            "pod": [] if intent.suspended else [pod_name(name)],
            "secret": [token_secret_name(name)],
            "claim": [workspace_claim_name(name)] if intent.persistent else [],
        }
        for kind, names in expected.items():
            got = sorted(o.metadata.name for o in mine[kind])
            if got != names:
                found.append(f"{name}: {kind}s {got}, expected {names}")
        pods = mine["pod"]
        if len(pods) == 1 and body.get("status", {}).get("podUID") not in (None, pods[0].metadata.uid):
            found.append(
                f"{name}: status.podUID {body['status']['podUID']} is not its pod's {pods[0].metadata.uid}"
            )
    return found


def _status_problems(name: str, intent: Intent, body: dict[str, Any]) -> list[str]:
    status = body.get("status") or {}
    generation = body["metadata"]["generation"]
    want_phase = "Suspended" if intent.suspended else "Pending"
    found = []
    if status.get("phase") != want_phase:
        found.append(f"{name}: phase {status.get('phase')}, expected {want_phase}")
    if status.get("observedGeneration") != generation:
        found.append(f"{name}: status.observedGeneration {status.get('observedGeneration')} != {generation}")
    suspended = next((c for c in status.get("conditions", []) if c["type"] == "Suspended"), None)
    want = "True" if intent.suspended else "False"
    if suspended is None or suspended["status"] != want:
        found.append(f"{name}: condition Suspended {suspended and suspended['status']}, expected {want}")
    return found


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("AGENTSESSION_CHAOS_SEED") or random.randrange(2**32))
    print(f"operator chaos seed: {value} (replay with AGENTSESSION_CHAOS_SEED={value})")
    return value


@pytest.fixture
def operators(
    kubeconfig: str, crd_installed: list[str], namespace_prefix: str, tmp_path: Path
) -> Iterator[Operators]:
    running = Operators(kubeconfig, tmp_path, f'["{namespace_prefix}-*"]')
    try:
        yield running
    finally:
        running.stop()


def test_operator_killed_during_a_burst_converges(
    seed: int, operators: Operators, sessions: Sessions
) -> None:
    schedule = draw_schedule(random.Random(seed))
    operators.start()
    began = time.monotonic()
    for step in schedule.steps:
        time.sleep(step.pause)  # the schedule's own pacing, not a wait for a condition
        if step.action == "kill":
            operators.kill()
        elif step.action == "start":
            operators.start()
        else:
            perform(sessions, step)
    burst = time.monotonic() - began

    def converged() -> bool:
        found = problems(sessions, schedule.final)
        assert not found, "\n".join(found)
        return True

    settled = time.monotonic()
    wait_until(
        f"convergence after the burst (seed {seed})", converged, timeout=CONVERGENCE_SECONDS, interval=0.5
    )
    print(f"seed {seed}: {len(schedule.steps)} steps, {operators.starts} operator starts, burst {burst:.1f}s, "
          f"converged {time.monotonic() - settled:.1f}s after it")  # fmt: skip
