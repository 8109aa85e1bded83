"""The API server, then etcd, stopped for a few seconds and started again under a running operator and gateway:
both recover by themselves (the same processes), no session keeps a stale status, and a gateway client that
stayed connected receives the transitions made right after the API came back.

While the API is down nothing changes, and the operator's liveness probe keeps answering: a dependency that is
down is no reason for the kubelet to restart the operator. Each case prints how long the API was down and how
long after its return the operator's statuses and the gateway's client were current.

Only on the local cluster (hack/cluster), whose daemons run on this machine; the outage is kept short (the API
server takes 10 s to stop, etcd stays down 6 s) and the component is always started again, since other runs share
the cluster.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes.client.exceptions import ApiException

from tests.conftest import wait_until
from tests.support import cluster_components
from tests.support.gateway import Client, gateway_process
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import OperatorProcess, agentctl_process

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

# At least this long down, and never more than MAX_DOWN before it is started again (a shared cluster).
HOLD_DOWN = 6.0
MAX_DOWN = 14.0
# The operator's /healthz answers within this, API or no API (a kubelet's probe timeout is about 10 s).
LIVENESS_ANSWER = 8.0
RECOVERY = 60.0
PENDING = {"podTemplate": {"nodeSelector": NOWHERE}}


@dataclass
class Outage:
    component: str
    stop_seconds: float = 0.0
    start_seconds: float = 0.0
    down_seconds: float = 0.0
    # Each liveness answer while down: (seconds since the stop, HTTP status, body).
    liveness: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)


async def hold_down(component: str, operator: OperatorProcess, http: aiohttp.ClientSession) -> Outage:
    """Stops `component`, asks the operator's liveness probe once a second while it is down (until one answer
    came from a probe run against the missing API, HOLD_DOWN at least), and starts it again, always."""
    outage = Outage(component)
    began = time.monotonic()
    try:
        await asyncio.to_thread(cluster_components.stop, component)
        outage.stop_seconds = time.monotonic() - began
        while True:
            asked = time.monotonic()
            outage.liveness.append((asked - began, *await ask_liveness(operator, http)))
            down = time.monotonic() - began
            probed_down = any("api" in body.get("watch", {}) for _, _, body in outage.liveness)
            if (down >= HOLD_DOWN and probed_down) or down >= MAX_DOWN:
                break
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - asked)))
    finally:
        restart = time.monotonic()
        await asyncio.to_thread(cluster_components.start, component)
        outage.start_seconds = time.monotonic() - restart
        outage.down_seconds = time.monotonic() - began
    return outage


async def ask_liveness(operator: OperatorProcess, http: aiohttp.ClientSession) -> tuple[int, dict[str, Any]]:
    """The operator's /healthz answer: its HTTP status and body; 0 and the error when it gives none in time."""
    try:
        async with http.get(operator.liveness_url, timeout=aiohttp.ClientTimeout(total=LIVENESS_ANSWER)) as r:
            text = await r.text()
    except (TimeoutError, aiohttp.ClientError) as error:
        return 0, {"error": f"no answer within {LIVENESS_ANSWER:.0f}s: {error!r}"}
    try:
        return r.status, dict(json.loads(text))
    except ValueError:
        return r.status, {"text": text[:300]}


def statuses(state: dict[str, Any]) -> dict[str, str]:
    return {agent["id"]: agent["status"] for agent in state["payload"]["agents"]}


def agent_status(agent_id: str, status: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: (
        f.get("type") == "agent_status"
        and f["payload"]["agentId"] == agent_id
        and f["payload"]["status"] == status
    )


def stale(sessions: Sessions, phases: dict[str, str]) -> list[str]:
    """Sessions whose status is not the current one: another phase, or written for an older generation."""
    found = []
    for name, phase in phases.items():
        body = sessions.get(name)
        status = body.get("status") or {}
        if status.get("phase") != phase:
            found.append(f"{name}: phase {status.get('phase')}, expected {phase}")
        if status.get("observedGeneration") != body["metadata"]["generation"]:
            found.append(f"{name}: observedGeneration {status.get('observedGeneration')} of generation "
                         f"{body['metadata']['generation']}")  # fmt: skip
    return found


def report_as_kubelet(sessions: Sessions, name: str) -> None:
    """Reports the session's pod (once it exists) running with agentctl ready, as its kubelet would, unless that
    report stands.

    The pod is pinned to no node, so the scheduler, which relists after an outage, tries it again and writes
    PodScheduled=False over the report; a kubelet would report again, so the test does.
    """
    try:
        pod = sessions.pod(name)
    except ApiException as error:
        if error.status == 404:
            return
        raise
    conditions = pod.status.conditions or []
    if not any(c.type == "PodScheduled" and c.status == "True" for c in conditions):
        sessions.play_kubelet(name, agentctl_ready=True)


@pytest.fixture(scope="module")
def operator_pid(operator: OperatorProcess) -> int:
    """The operator's process id at the first case: every case must end with that same process."""
    return operator.proc.pid


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
async def test_operator_and_gateway_recover_from_a_restart(
    component: str,
    local_cluster: Path,
    operator: OperatorProcess,
    operator_pid: int,
    sessions: Sessions,
    namespace: str,
    kubeconfig: str,
    agentctl_port: int,
    workdir: Path,
    tmp_path: Path,
) -> None:
    ids = {name: f"{namespace}/{name}" for name in ("running", "dormant", "fresh")}
    sessions.create("running", PENDING)
    sessions.create("dormant", {**PENDING, "suspend": True})
    before = {"running": "Pending", "dormant": "Suspended"}
    await asyncio.to_thread(wait_until, "statuses before the outage", lambda: not stale(sessions, before), 60)
    # dormant's agentctl runs all along (on loopback, as the operator is told to reach it), ready for its pod.
    token = sessions.token("dormant")
    args = ("--namespace", namespace, "--insecure-dev-mode")
    with (
        agentctl_process(workdir, token, tmp_path / "agentctl.log", port=agentctl_port),
        gateway_process(kubeconfig, tmp_path / "gateway.log", *args) as gateway,
    ):
        async with aiohttp.ClientSession() as http:
            ui = Client(await http.ws_connect(gateway.ws_url))
            hello = await ui.wait_for("session_state", lambda f: f.get("type") == "session_state")
            assert statuses(hello) == {ids["running"]: "initializing", ids["dormant"]: "uninitialized"}

            outage = await hold_down(component, operator, http)
            back, mark = time.monotonic(), len(ui.frames)
            assert [status for _, status, _ in outage.liveness] == [200] * len(outage.liveness), (
                outage.liveness
            )
            assert any("api" in body["watch"] for _, _, body in outage.liveness), (
                f"no liveness answer came from a probe run while {component} was down: {outage.liveness}"
            )

            # Right after the API is back: a suspend, a resume that goes all the way to Ready, a new session.
            sessions.patch_spec("running", {"suspend": True})
            sessions.patch_spec("dormant", {"suspend": False})
            sessions.create("fresh", PENDING)
            phases = {"running": "Suspended", "dormant": "Ready", "fresh": "Pending"}
            seen = {"running": "uninitialized", "dormant": "ready", "fresh": "initializing"}

            def current() -> bool:
                report_as_kubelet(sessions, "dormant")
                found = stale(sessions, phases)
                assert not found, "\n".join(found)
                return True

            async def operator_current() -> float:
                await asyncio.to_thread(wait_until, "every status current", current, RECOVERY)
                return time.monotonic() - back

            async def gateway_told() -> float:
                for name, status in seen.items():
                    await ui.wait_for(
                        f"{name} {status}", agent_status(ids[name], status), RECOVERY, since=mark
                    )
                return time.monotonic() - back

            operator_after, gateway_after = await asyncio.gather(operator_current(), gateway_told())

            # A client connecting now is told the same.
            late = Client(await http.ws_connect(gateway.ws_url))
            hello = await late.wait_for("session_state", lambda f: f.get("type") == "session_state")
            assert statuses(hello) == {ids[name]: status for name, status in seen.items()}
            await late.close()
            await ui.close()

    assert operator.proc.poll() is None, f"the operator exited:\n{operator.output()[-3000:]}"
    assert operator.proc.pid == operator_pid, "the operator is another process than at the first case"
    print(
        f"{component}: stopped in {outage.stop_seconds:.1f}s, started in {outage.start_seconds:.1f}s, down "
        f"{outage.down_seconds:.1f}s; liveness answered {len(outage.liveness)} times while down; after the API "
        f"was back: the operator's statuses current in {operator_after:.1f}s (a resumed session Ready), the "
        f"gateway's client told every transition in {gateway_after:.1f}s"
    )
