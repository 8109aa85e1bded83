"""Two operator replicas on one Lease: exactly one acts; the other takes over when the leader is killed or stopped,
and a leader that sees another holder exits at once. The election's default times (15 s lease, 10 s renew
deadline, 2 s retry), so the failover times printed here are the ones docs/architecture.md reports."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agentsession.controller.leader import micro_time
from agentsession.controller.main import LOST_LEADERSHIP_EXIT_CODE
from tests.conftest import wait_until
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import OperatorProcess, operator_process

pytestmark = pytest.mark.cluster

LEASE = "agentsession-operator"
DURATION, RETRY = 15, 2
LEADER = "agentsession_operator_leader"
RECONCILES = "agentsession_reconcile_duration_seconds_count"


class Lease:
    def __init__(self, kube_api: Any, namespace: str) -> None:
        self.api = client.CoordinationV1Api(kube_api)
        self.namespace = namespace

    def holder(self) -> str:
        return str(self.api.read_namespaced_lease(LEASE, self.namespace).spec.holder_identity or "")

    def taken_from(self, previous: str) -> str | None:
        """The new holder once one other than `previous` holds the Lease."""
        holder = self.holder()
        return holder if holder not in ("", previous) else None


def _settings(namespace_prefix: str, namespace: str) -> dict[str, str]:
    return {
        "namespaces": f'["{namespace_prefix}-*"]',
        "leader_election": "true",
        "leader_election_namespace": namespace,
    }


def _create(sessions: Sessions, *names: str) -> None:
    for name in names:
        sessions.create(name, {"podTemplate": {"nodeSelector": NOWHERE}})


def _wait_for_pods(sessions: Sessions, names: list[str], timeout: float) -> None:
    wait_until(f"pods of {names}", lambda: all(sessions.get(n).get("status", {}).get("podName") for n in names),
               timeout=timeout)  # fmt: skip


def _assert_created_once(sessions: Sessions, names: list[str]) -> None:
    for name in names:
        pods = sessions.core.list_namespaced_pod(
            sessions.namespace, label_selector=f"agentsession.dev/name={name}"
        ).items
        assert [p.metadata.name for p in pods] == [f"{name}-agent"], name
        created = [e for e in sessions.events(name) if e.reason == "PodCreated"]
        assert len(created) == 1, f"{name}: {[e.message for e in created]}"


def _health(running: OperatorProcess) -> dict[str, Any]:
    with urllib.request.urlopen(running.liveness_url, timeout=15) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def _standing_by(standby: OperatorProcess, lease: Lease, holder: str) -> None:
    # /healthz answers from the start; the holder once the standby's first read of the Lease is done.
    expected = {"leader": False, "lease": f"{lease.namespace}/{LEASE}", "holder": holder}
    wait_until("the standby naming the leader", lambda: _health(standby) == expected, timeout=2 * RETRY + 5)
    assert standby.sample(LEADER) == 0


def test_one_replica_acts_and_the_standby_takes_over_from_a_killed_leader(
    kubeconfig: str,
    kube_api: Any,
    crd_installed: list[str],
    namespace_prefix: str,
    namespace: str,
    sessions: Sessions,
    tmp_path: Path,
) -> None:
    settings, lease = _settings(namespace_prefix, namespace), Lease(kube_api, namespace)
    with (
        operator_process(kubeconfig, tmp_path / "first.log", **settings) as first,
        operator_process(kubeconfig, tmp_path / "second.log", standby=True, **settings) as second,
    ):
        holder = lease.holder()
        assert holder
        assert first.sample(LEADER) == 1
        _standing_by(second, lease, holder)
        before = ["a", "b", "c"]
        _create(sessions, *before)
        _wait_for_pods(sessions, before, 30)
        uids = {n: sessions.pod(n).metadata.uid for n in before}
        assert first.sample(RECONCILES) > 0
        assert second.sample(RECONCILES) == 0, "the standby reconciled"

        killed = time.monotonic()
        first.kill()
        during = ["d", "e"]
        _create(sessions, *during)
        successor = wait_until(
            "another holder", lambda: lease.taken_from(holder), timeout=DURATION + 10, interval=0.1
        )
        taken = time.monotonic() - killed
        _wait_for_pods(sessions, during, 30)
        served = time.monotonic() - killed
        print(
            f"\nSIGKILL of the leader: lease taken over after {taken:.1f}s, sessions served after {served:.1f}s"
        )
        # The standby waits out the whole lease from the last renewal it saw (up to one retry period before
        # the kill), and tries once per retry period.
        assert DURATION - RETRY - 1 <= taken <= DURATION + 2 * RETRY + 2, taken
        assert second.sample(LEADER) == 1
        assert second.sample(RECONCILES) > 0
        assert f"as {successor}" in second.output()
        wait_until(
            "kopf's probes on the new leader's /healthz", lambda: "watch" in _health(second), timeout=30
        )
        _assert_created_once(sessions, before + during)
        assert {n: sessions.pod(n).metadata.uid for n in before} == uids, "the new leader adopted the pods"


def test_a_stopped_leader_releases_the_lease_and_the_standby_takes_over_at_once(
    kubeconfig: str,
    kube_api: Any,
    crd_installed: list[str],
    namespace_prefix: str,
    namespace: str,
    sessions: Sessions,
    tmp_path: Path,
) -> None:
    settings, lease = _settings(namespace_prefix, namespace), Lease(kube_api, namespace)
    with (
        operator_process(kubeconfig, tmp_path / "first.log", **settings) as first,
        operator_process(kubeconfig, tmp_path / "second.log", standby=True, **settings) as second,
    ):
        holder = lease.holder()
        _standing_by(second, lease, holder)
        names = [f"s{i}" for i in range(4)]
        _create(sessions, *names[:2])
        stopped = time.monotonic()
        first.proc.terminate()
        _create(sessions, *names[2:])
        wait_until("another holder", lambda: lease.taken_from(holder), timeout=DURATION, interval=0.1)
        taken = time.monotonic() - stopped
        _wait_for_pods(sessions, names, 30)
        served = time.monotonic() - stopped
        print(
            f"\nSIGTERM of the leader: lease taken over after {taken:.1f}s, sessions served after {served:.1f}s"
        )
        # Without the release the standby would wait out the whole lease duration.
        assert taken < DURATION / 2, taken
        assert first.proc.wait(timeout=15) == 0
        assert "released the leader lease" in first.output()
        assert second.sample(LEADER) == 1
        _assert_created_once(sessions, names)


def test_a_leader_that_sees_another_holder_exits_at_once(
    kubeconfig: str,
    kube_api: Any,
    crd_installed: list[str],
    namespace_prefix: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    lease = Lease(kube_api, namespace)
    with operator_process(
        kubeconfig, tmp_path / "leader.log", **_settings(namespace_prefix, namespace)
    ) as leader:
        now = micro_time(datetime.now(UTC))
        lease.api.patch_namespaced_lease(
            LEASE, namespace, {"spec": {"holderIdentity": "intruder", "renewTime": now, "acquireTime": now}}
        )
        code = leader.proc.wait(timeout=2 * RETRY + 5)
        assert code == LOST_LEADERSHIP_EXIT_CODE
        assert "lost the leader lease (intruder holds the leader lease" in leader.output()
        assert lease.holder() == "intruder", "a replica that lost writes nothing"
