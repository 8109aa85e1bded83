"""A real Prometheus scrapes a real operator, gateway and session pod, and finds every metric the docs name.

Prometheus (the Debian binary) runs on loopback with a generated configuration: static targets for the operator's
and the gateway's metrics ports, and for agentctl at the session pod's IP, whose /metrics needs no token (the node is
this machine, so pod IPs answer from here). After one session started and answered a prompt through the gateway,
every metric of docs/observability.md is in Prometheus' metadata, and the values that must have moved have.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import require_tool, wait_until
from tests.gateway.conftest import Client
from tests.support.gateway import gateway_process
from tests.support.kube import Sessions
from tests.support.metric_names import documented_metrics
from tests.support.processes import OperatorProcess, free_port, stop, wait_http

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

SESSION = "scraped"


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def value(self, promql: str) -> float | None:
        """The value of an expression that gives one series, or None when it gives none."""
        result = self.api("query", query=promql)["result"]
        assert len(result) <= 1, f"{promql} gives {len(result)} series"
        return float(result[0]["value"][1]) if result else None

    def target_health(self) -> dict[str, str]:
        return {t["labels"]["job"]: t["health"] for t in self.api("targets")["activeTargets"]}


@contextmanager
def prometheus_process(binary: str, home: Path, config: dict[str, Any]) -> Iterator[Prometheus]:
    """Prometheus on a free loopback port with `config`, its data and log under `home`."""
    home.mkdir()
    (home / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = home / "prometheus.log"
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [binary, f"--config.file={home / 'prometheus.yml'}", f"--storage.tsdb.path={home / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready", 60, proc, log)
        yield Prometheus(f"http://127.0.0.1:{port}")
    finally:
        stop(proc)


def scrape_config(operator: OperatorProcess, gateway_metrics: str, pod_ip: str) -> dict[str, Any]:
    def job(name: str, target: str, **extra: Any) -> dict[str, Any]:
        return {"job_name": name, "static_configs": [{"targets": [target]}], **extra}

    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            job("operator", urllib.parse.urlsplit(operator.metrics_url).netloc),
            job("gateway", urllib.parse.urlsplit(gateway_metrics).netloc),
            # Open, like its probes: a scraper can send only a bearer token, which agentctl never takes.
            job("agentctl", f"{pod_ip}:9999"),
        ],
    }


async def prompt_through_the_gateway(ws_url: str, agent_id: str) -> None:
    """Initializes the session and runs one turn, so the gateway's and agentctl's counters move."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        ui = Client(await http.ws_connect(ws_url))
        try:
            await ui.request(
                {"type": "initialize_agent_request", "agentId": agent_id, "requestId": "init"},
                lambda f: f.get("type") == "agent_initialized", "agent_initialized", within=60,
            )  # fmt: skip
            mark = len(ui.frames)
            await ui.send({"type": "send_agent_message", "agentId": agent_id, "text": "count this turn"})
            await ui.wait_for(
                "the turn's end",
                lambda f: (
                    f.get("type") == "agent_update"
                    and f["payload"]["notification"]["update"].get("sessionUpdate") == "agent_message_chunk"
                ),
                within=60,
                since=mark,
            )
            await ui.wait_for(
                "ready after the turn",
                lambda f: f.get("type") == "agent_status" and f["payload"]["status"] == "ready",
                within=60,
                since=mark,
            )
        finally:
            await ui.close()


async def test_prometheus_scrapes_every_documented_metric(
    node_operator: OperatorProcess, sessions: Sessions, namespace: str, kubeconfig: str, tmp_path: Path
) -> None:
    binary = require_tool("prometheus")
    sessions.create(SESSION, {"workspace": {"emptyDir": True}})
    args = ("--namespace", namespace, "--insecure-dev-mode")
    with gateway_process(kubeconfig, tmp_path / "gateway.log", *args) as gateway:
        await sessions.until_ready(SESSION)
        await prompt_through_the_gateway(gateway.ws_url, f"{namespace}/{SESSION}")
        pod_ip = sessions.get(SESSION)["status"]["podIP"]
        config = scrape_config(node_operator, gateway.metrics_url, pod_ip)
        with prometheus_process(binary, tmp_path / "prometheus", config) as prom:
            every_job_up = {"operator": "up", "gateway": "up", "agentctl": "up"}
            await asyncio.to_thread(
                wait_until, "all three targets up", lambda: prom.target_health() == every_job_up, 30
            )
            await asyncio.to_thread(check_documented_metrics, prom)


def check_documented_metrics(prom: Prometheus) -> None:
    documented = documented_metrics()
    process = documented.pop("process")
    expected = {job: names | (process if job != "agentctl" else set()) for job, names in documented.items()}

    def announced(job: str) -> set[str]:
        """Every family the job's target announces in its /metrics (`# TYPE`), sampled yet or not."""
        return {m["metric"] for m in prom.api("targets/metadata", match_target=f'{{job="{job}"}}')}

    # Metadata fills in as scrapes go by.
    for job, names in expected.items():
        wait_until(
            f"the {job}'s documented metrics in Prometheus",
            lambda job=job, names=names: not names - announced(job),
            15,
        )

    sane = {
        'sum(agentsession_sessions{job="operator", phase="Ready"})': lambda v: v >= 1,
        'sum(agentsession_reconcile_duration_seconds_count{job="operator"})': lambda v: v > 0,
        'sum(agentsession_startup_stage_seconds_count{job="operator", stage="acp_initialized"})': lambda v: (
            v >= 1
        ),
        'sum(agentsession_gateway_initializations_total{job="gateway", outcome="ok"})': lambda v: v >= 1,
        'sum(agentsession_gateway_upstream_streams{job="gateway", stream="updates"})': lambda v: v >= 1,
        'sum(agentctl_turns_total{job="agentctl", stop_reason="end_turn"})': lambda v: v >= 1,
        'sum(agentctl_agent_attachments_total{job="agentctl"})': lambda v: v >= 1,
        'process_resident_memory_bytes{job="gateway"}': lambda v: 10e6 < v < 2e9,
        'process_resident_memory_bytes{job="operator"}': lambda v: 10e6 < v < 2e9,
        'process_open_fds{job="gateway"}': lambda v: v > 0,
    }
    for promql, holds in sane.items():
        value = prom.value(promql)
        assert value is not None, f"{promql}: no series"
        assert holds(value), f"{promql} = {value}"
