"""The operator against a real API server: the test plays the kubelet for pods pinned to no node, and a real
agentctl (with the demo agent) runs on loopback where the operator is told to reach it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.conftest import wait_until
from tests.support.agentctl_signing import instance_of, signed
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import AgentctlProcess, OperatorProcess, agentctl_process

pytestmark = pytest.mark.cluster


def history(agentctl: AgentctlProcess, token: str) -> list[dict[str, Any]]:
    path = "/api/v1/history"
    request = urllib.request.Request(
        agentctl.url + path, headers=signed(token, instance_of(agentctl.url), "GET", path)
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return list(json.load(response)["updates"])


def user_prompts(updates: list[dict[str, Any]]) -> list[str]:
    return [
        u["notification"]["update"]["content"]["text"]
        for u in updates
        if u.get("notification", {}).get("update", {}).get("sessionUpdate") == "user_message_chunk"
    ]


def test_apply_creates_token_secret_and_pod_with_the_sidecar(
    operator: OperatorProcess, sessions: Sessions
) -> None:
    sessions.create("alpha", {"title": "t", "podTemplate": {"nodeSelector": NOWHERE}})
    pod = wait_until("the session's pod", lambda: sessions.pod("alpha"), timeout=30)
    session = sessions.get("alpha")
    assert pod.metadata.owner_references[0].uid == session["metadata"]["uid"]
    sidecar = pod.spec.init_containers[-1]
    assert (sidecar.name, sidecar.restart_policy) == ("agentctl", "Always")
    assert sidecar.readiness_probe.http_get.path == "/health"
    assert len(sessions.token("alpha")) >= 32
    pending = wait_until(
        "phase Pending with PodScheduled=False",
        lambda: sessions.has_condition("alpha", "PodScheduled", "False"),
    )
    assert pending["reason"] in {"Unschedulable", "Pending"}
    status = sessions.get("alpha")["status"]
    assert status["phase"] == "Pending"
    assert status["podName"] == "alpha-agent"
    assert {c["type"] for c in status["conditions"]} == {
        "PodScheduled",
        "AgentctlReady",
        "AgentInitialized",
        "Suspended",
        "Ready",
        "BudgetExhausted",
    }


def test_readiness_reaches_status_start_is_called_and_restart_resumes(
    operator: OperatorProcess, sessions: Sessions, agentctl_port: int, workdir: Path, tmp_path: Path
) -> None:
    sessions.create(
        "beta", {"prompt": "first words", "mode": "code", "podTemplate": {"nodeSelector": NOWHERE}}
    )
    wait_until("pod", lambda: sessions.pod("beta"), timeout=30)
    token = sessions.token("beta")
    with agentctl_process(workdir, token, tmp_path / "agentctl-1.log", port=agentctl_port) as agentctl:
        sessions.play_kubelet("beta", agentctl_ready=True)
        ready = wait_until("Ready=True", lambda: sessions.has_condition("beta", "Ready", "True"), timeout=60)
        assert ready["reason"] == "Ready"
        status = sessions.get("beta")["status"]
        assert status["phase"] == "Ready"
        assert sessions.has_condition("beta", "AgentctlReady", "True", "ProbeSucceeded")
        assert sessions.has_condition("beta", "AgentInitialized", "True", "Initialized")
        session_id = status["acp"]["sessionId"]
        assert session_id
        assert status["acp"]["podUID"] == sessions.pod("beta").metadata.uid
        assert status["startup"]["initializedSeconds"] >= 0
        wait_until(
            "the initial prompt in the history",
            lambda: "first words" in user_prompts(history(agentctl, token)),
        )

    # agentctl restarts (the kubelet counts it): the operator resumes the same ACP session, without the prompt.
    sessions.play_kubelet("beta", agentctl_ready=False, restarts=1)
    wait_until("Ready=False", lambda: sessions.has_condition("beta", "Ready", "False"), timeout=30)
    with agentctl_process(workdir, token, tmp_path / "agentctl-2.log", port=agentctl_port) as agentctl:
        sessions.play_kubelet("beta", agentctl_ready=True, restarts=1)
        wait_until("Ready again", lambda: sessions.has_condition("beta", "Ready", "True"), timeout=60)
        status = sessions.get("beta")["status"]
        assert status["acp"]["sessionId"] == session_id
        assert status["acp"]["agentctlRestartCount"] == 1
        assert user_prompts(history(agentctl, token)) == ["first words"]

    wait_until(
        "events of each stage",
        lambda: sessions.has_events("beta", "PodCreated", "Pending", "Ready"),
        timeout=30,
    )


def test_start_failure_is_reported_and_retried(
    operator: OperatorProcess, sessions: Sessions, agentctl_port: int, workdir: Path, tmp_path: Path
) -> None:
    sessions.create("gamma", {"podTemplate": {"nodeSelector": NOWHERE}})
    wait_until("pod", lambda: sessions.pod("gamma"), timeout=30)
    # The probe says ready but nothing listens yet: the start call fails, and says where it went.
    sessions.play_kubelet("gamma", agentctl_ready=True)
    failed = wait_until(
        "AgentInitialized=False InitializeFailed",
        lambda: sessions.has_condition("gamma", "AgentInitialized", "False", "InitializeFailed"),
        timeout=30,
    )
    assert f"127.0.0.1:{agentctl_port}/api/v1/start" in failed["message"]
    with agentctl_process(workdir, sessions.token("gamma"), tmp_path / "agentctl.log", port=agentctl_port):
        wait_until("Ready after retry", lambda: sessions.has_condition("gamma", "Ready", "True"), timeout=30)


def test_probe_failure_shows_the_kubelet_reason(operator: OperatorProcess, sessions: Sessions) -> None:
    sessions.create("delta", {"podTemplate": {"nodeSelector": NOWHERE}})
    pod = wait_until("pod", lambda: sessions.pod("delta"), timeout=30)
    sessions.core.create_namespaced_event(
        sessions.namespace,
        {
            "metadata": {"generateName": "delta-agent."},
            "involvedObject": {
                "kind": "Pod",
                "name": pod.metadata.name,
                "namespace": sessions.namespace,
                "uid": pod.metadata.uid,
                # The kubelet names the container whose probe failed.
                "fieldPath": "spec.initContainers{agentctl}",
            },
            "reason": "Unhealthy",
            "type": "Warning",
            "message": "Readiness probe failed: HTTP probe failed with statuscode: 503",
            "source": {"component": "kubelet"},
            # Past the start-up grace of the agentctl the test plays (started at 00:00:00).
            "lastTimestamp": "2026-01-01T00:00:10Z",
        },
    )
    sessions.play_kubelet("delta", agentctl_ready=False, started=True)
    failing = wait_until(
        "AgentctlReady=False ProbeFailing",
        lambda: sessions.has_condition("delta", "AgentctlReady", "False", "ProbeFailing"),
        timeout=30,
    )
    assert "statuscode: 503" in failing["message"]
    assert sessions.has_condition("delta", "Ready", "False", "ProbeFailing")


def test_suspend_deletes_the_pod_and_keeps_the_workspace(
    operator: OperatorProcess, sessions: Sessions
) -> None:
    sessions.create("eps", {"workspace": {"size": "1Gi"}, "podTemplate": {"nodeSelector": NOWHERE}})
    first = wait_until("pod", lambda: sessions.pod("eps"), timeout=30)
    claim = sessions.core.read_namespaced_persistent_volume_claim("eps-workspace", sessions.namespace)
    sessions.patch_spec("eps", {"suspend": True})

    def pod_gone() -> bool:
        try:
            sessions.pod("eps")
        except ApiException as error:
            return error.status == 404
        return False

    wait_until("pod deleted", pod_gone, timeout=60)
    suspended = wait_until(
        "Suspended=True", lambda: sessions.has_condition("eps", "Suspended", "True"), timeout=30
    )
    assert suspended["reason"] == "Suspended"
    assert sessions.get("eps")["status"]["phase"] == "Suspended"
    kept = sessions.core.read_namespaced_persistent_volume_claim("eps-workspace", sessions.namespace)
    assert kept.metadata.uid == claim.metadata.uid

    sessions.patch_spec("eps", {"suspend": False})
    second = wait_until("a new pod", lambda: sessions.pod("eps"), timeout=30)
    assert second.metadata.uid != first.metadata.uid
    wait_until("Suspended=False", lambda: sessions.has_condition("eps", "Suspended", "False"), timeout=30)
    assert sessions.get("eps")["status"]["podsCreated"] == 2


def test_pod_deleted_behind_the_operators_back_is_recreated(
    operator: OperatorProcess, sessions: Sessions
) -> None:
    sessions.create("zeta", {"podTemplate": {"nodeSelector": NOWHERE}})
    first = wait_until("pod", lambda: sessions.pod("zeta"), timeout=30)
    wait_until(
        "status names the pod",
        lambda: sessions.get("zeta").get("status", {}).get("podUID") == first.metadata.uid,
    )
    sessions.core.delete_namespaced_pod("zeta-agent", sessions.namespace, grace_period_seconds=0)

    def replaced() -> Any:
        pod = sessions.pod("zeta")
        return pod if pod.metadata.uid != first.metadata.uid else None

    wait_until("a replacement pod", replaced, timeout=30)
    wait_until("a PodDeleted event", lambda: sessions.has_events("zeta", "PodDeleted"), timeout=30)


def test_delete_garbage_collects_every_child(operator: OperatorProcess, sessions: Sessions) -> None:
    sessions.create("eta", {"workspace": {"size": "1Gi"}, "podTemplate": {"nodeSelector": NOWHERE}})
    wait_until("pod", lambda: sessions.pod("eta"), timeout=30)
    wait_until("secret", lambda: sessions.token("eta"), timeout=30)
    sessions.delete("eta")
    ns = sessions.namespace
    core = sessions.core

    def gone(read: Any, name: str) -> bool:
        try:
            read(name, ns)
        except ApiException as error:
            return error.status == 404
        return False

    wait_until("pod collected", lambda: gone(core.read_namespaced_pod, "eta-agent"), timeout=60)
    wait_until(
        "secret collected", lambda: gone(core.read_namespaced_secret, "eta-agentctl-token"), timeout=60
    )
    wait_until(
        "claim collected",
        lambda: (
            gone(core.read_namespaced_persistent_volume_claim, "eta-workspace")
            or core.read_namespaced_persistent_volume_claim("eta-workspace", ns).metadata.deletion_timestamp
        ),
        timeout=60,
    )


def test_metrics_and_liveness(operator: OperatorProcess, sessions: Sessions) -> None:
    sessions.create("theta", {"podTemplate": {"nodeSelector": NOWHERE}})
    wait_until("status", lambda: sessions.get("theta").get("status", {}).get("phase"), timeout=30)

    def metrics_with_reconciles() -> str | None:
        text = operator.metrics()
        return text if "agentsession_reconcile_duration_seconds_count" in text else None

    text = wait_until("reconcile metrics", metrics_with_reconciles)
    assert 'agentsession_sessions{phase="Pending"}' in text

    def probed_sessions() -> bool:
        # kopf caches probe results for 10 s, so an answer may predate the session.
        with urllib.request.urlopen(operator.liveness_url, timeout=15) as response:
            return bool(json.load(response)["watch"]["sessions"] >= 1)

    wait_until("the liveness probe counting sessions", probed_sessions, timeout=30)


def test_status_subresource_is_separate_from_spec(
    kube_api: Any, crd_installed: list[str], sessions: Sessions
) -> None:
    created = sessions.create("iota", {"title": "before"})
    custom = client.CustomObjectsApi(kube_api)
    args = ("agentsession.dev", "v1alpha1", sessions.namespace, "agentsessions", "iota")
    # A status written through the main resource is ignored...
    custom.patch_namespaced_custom_object(*args, {"status": {"phase": "Ready"}})
    assert "status" not in sessions.get("iota") or sessions.get("iota")["status"].get("phase") != "Ready"
    # ...and a spec written through /status is ignored; status writes never bump the generation.
    custom.patch_namespaced_custom_object_status(
        *args, {"status": {"phase": "Pending"}, "spec": {"title": "x"}}
    )
    after = sessions.get("iota")
    assert after["status"]["phase"] == "Pending"
    assert after["spec"]["title"] == "before"
    assert after["metadata"]["generation"] == created["metadata"]["generation"]
    # Fields outside the schema are pruned, not stored.
    custom.patch_namespaced_custom_object_status(*args, {"status": {"bogus": 1}})
    assert "bogus" not in sessions.get("iota")["status"]


def test_evicted_pod_is_replaced(operator: OperatorProcess, sessions: Sessions) -> None:
    sessions.create("kappa", {"podTemplate": {"nodeSelector": NOWHERE}})
    first = wait_until("pod", lambda: sessions.pod("kappa"), timeout=30)
    sessions.fail_pod("kappa", "Evicted", "The node was low on resource: memory.")

    def replaced() -> Any:
        pod = sessions.pod("kappa")
        return pod if pod.metadata.uid != first.metadata.uid else None

    wait_until("a replacement pod", replaced, timeout=60)
    wait_until(
        "ReplacingFailedPod and Evicted events",
        lambda: sessions.has_events("kappa", "ReplacingFailedPod", "Evicted"),
        timeout=30,
    )


def test_max_duration_suspends_the_session(operator: OperatorProcess, sessions: Sessions) -> None:
    sessions.create("lambda", {"lifecycle": {"maxDuration": "1h"}, "podTemplate": {"nodeSelector": NOWHERE}})
    pod = wait_until("pod", lambda: sessions.pod("lambda"), timeout=30)
    assert pod.spec.active_deadline_seconds == 3600
    sessions.fail_pod(
        "lambda", "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
    )
    wait_until("spec.suspend set", lambda: sessions.get("lambda")["spec"]["suspend"], timeout=30)
    wait_until("Suspended=True", lambda: sessions.has_condition("lambda", "Suspended", "True"), timeout=30)
    wait_until(
        "a MaxDurationReached event", lambda: sessions.has_events("lambda", "MaxDurationReached"), timeout=30
    )


def test_pod_template_change_replaces_the_pod_but_a_title_change_does_not(
    operator: OperatorProcess, sessions: Sessions
) -> None:
    sessions.create("mu", {"podTemplate": {"nodeSelector": NOWHERE}})
    first = wait_until("pod", lambda: sessions.pod("mu"), timeout=30)
    sessions.patch_spec("mu", {"title": "renamed"})
    wait_until(
        "generation 2 observed", lambda: sessions.get("mu").get("status", {}).get("observedGeneration") == 2
    )
    assert sessions.pod("mu").metadata.uid == first.metadata.uid

    sessions.patch_spec("mu", {"agent": {"env": [{"name": "LOG_LEVEL", "value": "debug"}]}})

    def replaced() -> Any:
        pod = sessions.pod("mu")
        return pod if pod.metadata.uid != first.metadata.uid else None

    second = wait_until("a replacement pod", replaced, timeout=60)
    env = {e.name: e.value for e in second.spec.containers[0].env}
    assert env["LOG_LEVEL"] == "debug"
    wait_until("a PodSpecChanged event", lambda: sessions.has_events("mu", "PodSpecChanged"), timeout=30)


def test_idle_timeout_suspends_an_idle_agent(
    operator: OperatorProcess, sessions: Sessions, agentctl_port: int, workdir: Path, tmp_path: Path
) -> None:
    sessions.create("nu", {"lifecycle": {"idleTimeout": "3s"}, "podTemplate": {"nodeSelector": NOWHERE}})
    wait_until("pod", lambda: sessions.pod("nu"), timeout=30)
    with agentctl_process(workdir, sessions.token("nu"), tmp_path / "agentctl.log", port=agentctl_port):
        sessions.play_kubelet("nu", agentctl_ready=True)
        wait_until("Ready=True", lambda: sessions.has_condition("nu", "Ready", "True"), timeout=30)
        wait_until("suspended when idle", lambda: sessions.get("nu")["spec"]["suspend"], timeout=30)
    wait_until("Suspended=True", lambda: sessions.has_condition("nu", "Suspended", "True"), timeout=30)
    wait_until("an IdleTimeout event", lambda: sessions.has_events("nu", "IdleTimeout"), timeout=30)
