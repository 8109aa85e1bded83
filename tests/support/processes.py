"""Real processes for tests: the operator entry point and agentctl with the demo agent, on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.release_key import key_file

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    what: str, probe: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes], log: Path
) -> None:
    """Polls `probe` while the process lives; the process's log tail goes with any failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: process exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        if probe():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout}s:\n{log.read_text()[-4000:]}")


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    def answers() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    wait_for(f"{url} answering 200", answers, timeout, proc, log)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_url: str
    liveness_url: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return str(response.read().decode())

    def kill(self) -> None:
        """Ends the operator abruptly, as a crash or a node failure would."""
        self.proc.kill()
        self.proc.wait(timeout=10)

    def sample(self, name: str) -> float:
        """The value of the unlabelled sample `name` on /metrics; 0 when there is none yet."""
        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return float(sample.value)
        return 0.0


@contextmanager
def operator_process(
    kubeconfig: str, log: Path, *, standby: bool = False, **settings: str
) -> Iterator[OperatorProcess]:
    """Runs `agentsession-operator` against the cluster; `settings` become AGENTSESSION_* variables.

    Unless told otherwise it watches only the namespaces the `namespace` fixture makes (`t-*`), so operators
    of test runs sharing a cluster never act on each other's sessions. It is up once it serves a new namespace;
    a `standby` (leader election, another replica leads) serves none, so it is up once /healthz answers.
    """
    settings.setdefault("namespaces", '["t-*"]')
    metrics_port, liveness_port = free_port(), free_port()
    env = {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "AGENTSESSION_METRICS_PORT": str(metrics_port),
        "AGENTSESSION_METRICS_HOST": "127.0.0.1",
        "AGENTSESSION_LOG_FORMAT": "json",
        "AGENTSESSION_AGENTCTL_KEY_FILE": str(key_file()),
        **{f"AGENTSESSION_{key.upper()}": value for key, value in settings.items()},
    }
    command = [str(BIN / "agentsession-operator"), "--liveness-port", str(liveness_port)]
    command += ["--liveness-host", "127.0.0.1"]
    with log.open("ab") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    running = OperatorProcess(
        proc,
        log,
        metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
        liveness_url=f"http://127.0.0.1:{liveness_port}/healthz",
    )
    try:
        wait_http(running.liveness_url, 60, proc, log)
        if not standby:
            _warm_up(kubeconfig, json.loads(settings["namespaces"]), proc, log)
        yield running
    finally:
        stop(proc)


def _warm_up(kubeconfig: str, patterns: list[str], proc: subprocess.Popen[bytes], log: Path) -> None:
    """Waits until the operator serves a namespace created right after its start.

    That is the moment a namespace observer that skips its own listings would miss (the operator serves patterns
    through a filtered cluster-wide watch instead), and tests begin on a serving operator.
    """
    from kubernetes import client, config

    globbed = [p for p in patterns if p.endswith("*") and not any(ch in p[:-1] for ch in "*?[")]
    if not globbed:
        return
    api = config.new_client_from_config(config_file=kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"{globbed[0][:-1]}warmup-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        session = {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "warmup"},
            "spec": {"suspend": True},
        }
        custom.create_namespaced_custom_object(
            "agentsession.dev", "v1alpha1", namespace, "agentsessions", session
        )

        def served() -> bool:
            body = custom.get_namespaced_custom_object(
                "agentsession.dev", "v1alpha1", namespace, "agentsessions", "warmup"
            )
            return bool(body.get("status", {}).get("phase"))

        wait_for(f"the operator serving namespace {namespace}", served, 90, proc, log)
    finally:
        core.delete_namespace(namespace)
        api.close()


@dataclass
class AgentctlProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def agentctl_process(
    workdir: Path, token: str, log: Path, port: int | None = None
) -> Iterator[AgentctlProcess]:
    """agentctl with the demo agent as a subprocess: what a session pod runs, outside a pod."""
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    command = [str(BIN / "agentctl"), "--host", "127.0.0.1", "--port", str(port), "--workdir", str(workdir)]
    command += ["--agent-command", str(BIN / "agentsession-demo-agent")]
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "AGENTCTL_TOKEN": token}
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 30, proc, log)
        yield AgentctlProcess(proc, port, log)
    finally:
        stop(proc)
