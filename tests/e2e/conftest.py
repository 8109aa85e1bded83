"""Fixtures of the node tier: an operator whose sessions run as real pods on the node."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.kube import Sessions
from tests.support.processes import OperatorProcess, operator_process


@pytest.fixture(scope="module")
def node_operator(
    kubeconfig: str, crd_installed: list[str], project_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The real operator, reaching each agentctl at its pod IP, with the project image on the node."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with operator_process(kubeconfig, log, image=project_image, image_pull_policy="IfNotPresent") as running:
        yield running


@pytest.fixture
def sessions(kube_api: Any, namespace: str) -> Sessions:
    return Sessions(kube_api, namespace)
