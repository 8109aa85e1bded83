from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import Sessions
from tests.support.processes import OperatorProcess, free_port, operator_process


@pytest.fixture(scope="module")
def agentctl_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def operator(
    kubeconfig: str, crd_installed: list[str], agentctl_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The real operator entry point; it reaches agentctl on loopback, where each test runs one."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with operator_process(
        kubeconfig,
        log,
        agentctl_host_override="127.0.0.1",
        agentctl_port=str(agentctl_port),
        start_retry_seconds="1",
    ) as running:
        yield running


@pytest.fixture
def sessions(kube_api: Any, namespace: str) -> Sessions:
    return Sessions(kube_api, namespace)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "workspace"
