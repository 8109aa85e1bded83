"""`kubectl agentsession get` and `status` show what the egress proxy metered and whether the budget is spent:
the plugin's one file run through kubectl, with a kubeconfig that may only read sessions. No operator runs: the
sessions' status is written through the status subresource, in a namespace no test operator serves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.conftest import service_account_token
from tests.gateway.test_kubectl_plugin import token_kubeconfig
from tests.support.kube import NOWHERE, Sessions
from tests.support.plugin import install_plugin, plugin_path, run_plugin
from tests.support.session_status import USAGE, WHY, own_namespace, write_status

pytestmark = pytest.mark.cluster

__all__ = ["own_namespace"]  # a fixture


@pytest.fixture
def namespace(own_namespace: str) -> str:
    return own_namespace


async def test_get_and_status_show_usage_and_the_budget(
    sessions: Sessions, namespace: str, kube_api: Any, kubeconfig: str, kubectl: str, tmp_path: Path
) -> None:
    path = plugin_path(install_plugin(tmp_path / "bin").parent, kubectl)
    sessions.create("spent", {"budget": {"maxRequests": 3}, "podTemplate": {"nodeSelector": NOWHERE}})
    sessions.create("fresh", {"suspend": True})
    write_status(kube_api, namespace, "spent", 1, exhausted=True)
    reader = token_kubeconfig(kubeconfig, service_account_token(kube_api, namespace, "reader", ["get", "list"]),
                              tmp_path / "reader")  # fmt: skip
    reach = ("-n", namespace, "--kubeconfig", str(reader))

    code, run = await run_plugin(kubectl, path, "get", *reach)
    assert code == 0, run
    header, *rows = [line.split() for line in run.stdout.splitlines()]
    assert header == ["NAME", "PHASE", "AGENT", "REQUESTS", "TOKENS", "COST", "BUDGET"]
    by_name = {row[0]: row for row in rows}
    assert by_name["spent"] == ["spent", "Ready", "demo", "3", "6540", "$0.0123", "exhausted"]
    assert by_name["fresh"] == ["fresh", "<none>", "demo", "0", "0", "$0", "ok"]

    code, run = await run_plugin(kubectl, path, "describe", "spent", *reach)
    assert code == 0, run
    assert "  BudgetExhausted=True Exhausted: " + WHY in run.stdout, run.stdout
    for line in ("Requests:       3", "Input tokens:   1200", "Cached tokens:  5000", "Output tokens:  340",
                 "Tokens:         6540", "Cost:           $0.0123", "Limits:         3 requests (spec.budget",
                 f"Exhausted:      yes: {WHY}; raise spec.budget to go on"):  # fmt: skip
        assert line in run.stdout, run.stdout

    code, run = await run_plugin(kubectl, path, "status", "spent", "-o", "json", *reach)
    assert code == 0, run
    shown = json.loads(run.stdout)
    assert {k: shown["usage"][k] for k in USAGE} == USAGE
    assert (shown["budget"], shown["budgetExhausted"]) == ({"maxRequests": 3}, WHY)

    code, run = await run_plugin(kubectl, path, "status", "missing", *reach)
    assert code == 1, run
    assert "no agentsessions.agentsession.dev/missing" in run.stderr, run
