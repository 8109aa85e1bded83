"""CRD schema and CEL rules as the real API server enforces them, with the messages users see."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentsession.api.acp import (
    DESCRIPTION_MAX_CHARS,
    LABEL_MAX_CHARS,
    MODE_ID_MAX_CHARS,
    MODES_MAX,
    SESSION_ID_MAX_CHARS,
)
from agentsession.api.constants import GROUP, PLURAL, VERSION
from tests.support.kube import Sessions

pytestmark = pytest.mark.cluster
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INVALID = sorted((EXAMPLES / "invalid").glob("*.yaml"))
VALID = sorted(EXAMPLES.glob("*.yaml"))


def apply(kubectl: str, namespace: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl, "apply", "--dry-run=server", "-n", namespace, "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("path", VALID, ids=[p.name for p in VALID])
def test_examples_are_accepted(kubectl: str, crd_installed: list[str], namespace: str, path: Path) -> None:
    result = apply(kubectl, namespace, path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", INVALID, ids=[p.name for p in INVALID])
def test_invalid_samples_are_rejected_with_their_message(
    kubectl: str, crd_installed: list[str], namespace: str, path: Path
) -> None:
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ")
    result = apply(kubectl, namespace, path)
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr


def _rejected(call: Any) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 422
    return str(caught.value.body)


def test_immutable_fields_cannot_change(crd_installed: list[str], sessions: Sessions) -> None:
    sessions.create("immutable", {"agent": {"type": "demo"}, "workspace": {"size": "1Gi"}})
    assert "agent.type cannot change after creation" in _rejected(
        lambda: sessions.patch_spec(
            "immutable", {"agent": {"type": "custom", "image": "x:1", "command": ["a"]}}
        )
    )
    assert "workspace.size is immutable" in _rejected(
        lambda: sessions.patch_spec("immutable", {"workspace": {"size": "2Gi"}})
    )
    # Mutable fields still change.
    assert (
        sessions.patch_spec("immutable", {"suspend": True, "title": "renamed"})["spec"]["title"] == "renamed"
    )


def test_defaults_are_applied_by_the_api_server(crd_installed: list[str], sessions: Sessions) -> None:
    created = sessions.create("defaults", {"workspace": {"size": "1Gi"}})
    assert created["spec"]["agent"]["type"] == "demo"
    assert created["spec"]["suspend"] is False
    assert created["spec"]["workspace"]["mountPath"] == "/workspace"


def test_the_status_refuses_what_an_agent_would_bloat_it_with(
    kube_api: Any, crd_installed: list[str], sessions: Sessions
) -> None:
    """The operator cuts what the agent says of itself before it writes status.acp; the API server refuses it too,
    should anything else write it uncut."""
    sessions.create("bloated", {"title": "bloated"})
    custom = client.CustomObjectsApi(kube_api)
    args = (GROUP, VERSION, sessions.namespace, PLURAL, "bloated")
    mode = {"id": "m", "name": "Mode"}
    oversized = [
        ({"availableModes": [mode] * (MODES_MAX + 1)}, "status.acp.availableModes: Too many"),
        (
            {"availableModes": [{**mode, "id": "i" * (MODE_ID_MAX_CHARS + 1)}]},
            "status.acp.availableModes[0].id",
        ),
        (
            {"availableModes": [{**mode, "description": "d" * (DESCRIPTION_MAX_CHARS + 1)}]},
            "status.acp.availableModes[0].description",
        ),
        ({"agentInfo": {"name": "n" * (LABEL_MAX_CHARS + 1)}}, "status.acp.agentInfo.name: Too long"),
        ({"sessionId": "s" * (SESSION_ID_MAX_CHARS + 1)}, "status.acp.sessionId: Too long"),
        ({"currentModeId": "c" * (MODE_ID_MAX_CHARS + 1)}, "status.acp.currentModeId: Too long"),
    ]
    for acp, refusal in oversized:
        message = _rejected(
            lambda acp=acp: custom.patch_namespaced_custom_object_status(*args, {"status": {"acp": acp}})
        )
        assert refusal in message, message
    # At the bounds it is kept.
    at_bounds = {"availableModes": [mode] * MODES_MAX, "agentInfo": {"name": "n" * LABEL_MAX_CHARS}}
    custom.patch_namespaced_custom_object_status(*args, {"status": {"acp": at_bounds}})
    assert len(sessions.get("bloated")["status"]["acp"]["availableModes"]) == MODES_MAX
