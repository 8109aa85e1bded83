"""Operator lifecycles: killed mid-reconcile (no duplicate or orphaned children), and serving named namespaces."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import operator_process

pytestmark = pytest.mark.cluster
COUNT = 8


def _children(sessions: Sessions, name: str) -> tuple[list[Any], list[Any]]:
    selector = f"agentsession.dev/name={name}"
    pods = sessions.core.list_namespaced_pod(sessions.namespace, label_selector=selector).items
    secrets = sessions.core.list_namespaced_secret(sessions.namespace, label_selector=selector).items
    return pods, secrets


def test_restart_mid_reconcile_creates_no_duplicates(
    kubeconfig: str, crd_installed: list[str], namespace_prefix: str, sessions: Sessions, tmp_path: Path
) -> None:
    settings = {"namespaces": f'["{namespace_prefix}-*"]'}
    names = [f"s{i}" for i in range(COUNT)]
    with operator_process(kubeconfig, tmp_path / "first.log", **settings) as first:
        for name in names:
            sessions.create(name, {"podTemplate": {"nodeSelector": NOWHERE}})
        # Kill it as soon as it has made some children, while the rest are still in flight.
        wait_until(
            "a first pod", lambda: any(_children(sessions, n)[0] for n in names), timeout=30, interval=0.05
        )
        first.kill()
    before = {name: _children(sessions, name) for name in names}

    with operator_process(kubeconfig, tmp_path / "second.log", **settings):

        def all_reconciled() -> bool:
            return all(sessions.get(n).get("status", {}).get("podName") for n in names)

        wait_until("every session reconciled by the new operator", all_reconciled, timeout=60)
        for name in names:
            pods, secrets = _children(sessions, name)
            assert len(pods) == 1, f"{name}: {[p.metadata.name for p in pods]}"
            assert len(secrets) == 1, f"{name}: {[s.metadata.name for s in secrets]}"
            old_pods, old_secrets = before[name]
            # What the first operator made was adopted, not replaced.
            if old_pods:
                assert pods[0].metadata.uid == old_pods[0].metadata.uid
            if old_secrets:
                assert secrets[0].metadata.uid == old_secrets[0].metadata.uid


def test_operator_serving_named_namespaces_only(
    kubeconfig: str, crd_installed: list[str], namespace: str, sessions: Sessions, tmp_path: Path
) -> None:
    # Named namespaces: no discovery scanning, sessions listed per namespace (what namespace-scoped RBAC allows).
    with operator_process(kubeconfig, tmp_path / "named.log", namespaces=f'["{namespace}"]') as running:
        sessions.create("named", {"podTemplate": {"nodeSelector": NOWHERE}})
        wait_until("pod", lambda: sessions.pod("named"), timeout=30)
        wait_until("status", lambda: sessions.get("named").get("status", {}).get("phase") == "Pending")

        def probed_sessions() -> bool:
            # kopf caches probe results for 10 s, so the first answer may predate the session.
            with urllib.request.urlopen(running.liveness_url, timeout=15) as response:
                return bool(json.load(response)["watch"]["sessions"] == 1)

        wait_until("the liveness probe counting the session", probed_sessions, timeout=30)
