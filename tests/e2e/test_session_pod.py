"""A whole session on a node: the kubelet runs agentctl and the demo agent from the project image, runs the
readiness probe, and the operator turns what it sees into conditions and starts ACP through the real agentctl."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from tests.conftest import LOCAL_KUBECONFIG, wait_until
from tests.support.kube import Sessions
from tests.support.node_processes import agentctl_pid
from tests.support.processes import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]


def test_session_pod_becomes_ready_through_the_kubelet_probe(
    node_operator: OperatorProcess, sessions: Sessions, kubeconfig: str
) -> None:
    sessions.create("real", {"title": "on a node", "prompt": "hello from the test"})
    ready = wait_until("Ready=True", lambda: sessions.has_condition("real", "Ready", "True"), timeout=180)
    assert ready["reason"] == "Ready"
    status = sessions.get("real")["status"]
    assert status["phase"] == "Ready"
    assert status["acp"]["sessionId"]
    assert status["acp"]["agentInfo"]["name"]
    pod = sessions.pod("real")
    agentctl = next(s for s in pod.status.init_container_statuses if s.name == "agentctl")
    assert agentctl.ready is True
    assert status["podIP"] == pod.status.pod_ip
    stages = ("PodCreated", "Pending", "Ready")
    reasons = wait_until("events of each stage", lambda: sessions.has_events("real", *stages), timeout=30)
    # The API lists events by name, and their names keep the order they were posted in.
    first_seen = [reasons.index(stage) for stage in stages]
    assert first_seen == sorted(first_seen), reasons
    # A short story for `kubectl describe`: a normal start is a handful of Events, none a Warning.
    assert len(reasons) <= 5, reasons
    assert all(event.type == "Normal" for event in sessions.events("real")), reasons

    if Path(kubeconfig) != LOCAL_KUBECONFIG:
        pytest.skip("freezing agentctl needs the node's processes: only on the local cluster")
    # Freeze agentctl: the kubelet's readiness probe times out, and the operator says so, with the probe's words.
    pid = agentctl_pid(sessions.token("real"))
    assert pid is not None, "no agentctl process with the session's token"
    os.kill(pid, signal.SIGSTOP)
    try:
        failing = wait_until(
            "AgentctlReady=False ProbeFailing",
            lambda: sessions.has_condition("real", "AgentctlReady", "False", "ProbeFailing"),
            timeout=30,
        )
        assert "Readiness probe failed" in failing["message"]
        assert sessions.has_condition("real", "Ready", "False", "ProbeFailing")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until("Ready again", lambda: sessions.has_condition("real", "Ready", "True"), timeout=60)
    assert sessions.get("real")["status"]["acp"]["sessionId"] == status["acp"]["sessionId"]
