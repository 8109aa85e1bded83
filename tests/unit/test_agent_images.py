"""The agent images' sources: one per known agent type, pinned, non-root, labelled, and a build script that lints."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest

from agentsession.api.models import AgentType

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
SCRIPTS = [ROOT / "hack" / "image" / name for name in ("build-agents.sh", "build.sh", "lib.sh")]
# Types that run the project's own image or one the session names.
NO_AGENT_IMAGE = {"demo", "custom"}
TYPES = sorted(set(get_args(AgentType)) - NO_AGENT_IMAGE)


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _pin(agent_type: str) -> tuple[str, str]:
    deps = _json(IMAGES / agent_type / "package.json")["dependencies"]
    assert len(deps) == 1, f"images/{agent_type}/package.json should pin exactly its adapter"
    ((name, version),) = deps.items()
    return name, version


def _labels(dockerfile: str) -> dict[str, str]:
    joined = dockerfile.replace("\\\n", " ")
    return dict(re.findall(r'([a-z][\w.-]*)="([^"]*)"', " ".join(re.findall(r"^LABEL (.*)$", joined, re.M))))


def test_every_known_agent_type_has_an_image() -> None:
    assert sorted(p.name for p in IMAGES.iterdir() if p.is_dir()) == TYPES


@pytest.mark.parametrize("agent_type", TYPES)
def test_package_json_pins_an_exact_version_the_lock_holds(agent_type: str) -> None:
    name, version = _pin(agent_type)
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} must be pinned to one version, not {version!r}"
    lock = _json(IMAGES / agent_type / "package-lock.json")
    assert lock["lockfileVersion"] >= 2
    packages = lock["packages"]
    assert packages[""]["dependencies"] == {name: version}, "package-lock.json is stale: run npm install"
    assert packages[f"node_modules/{name}"]["version"] == version
    unpinned = [path for path, entry in packages.items() if path and not entry.get("integrity")]
    assert not unpinned, f"lock entries without an integrity hash: {unpinned}"


@pytest.mark.parametrize("agent_type", TYPES)
def test_dockerfile_runs_the_adapter_unprivileged_with_labels(agent_type: str) -> None:
    dockerfile = (IMAGES / agent_type / "Dockerfile").read_text()
    name, version = _pin(agent_type)
    assert re.search(r"^USER 65532:65532$", dockerfile, re.M)
    assert "agent:x:65532:65532:" in dockerfile, "uid 65532 needs a name in /etc/passwd"
    assert re.search(r"^\s+HOME=/tmp\b|^ENV HOME=/tmp\b", dockerfile, re.M)
    labels = _labels(dockerfile)
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.title"] == f"agentsession-{agent_type}"
    assert labels["dev.agentsession.adapter"] == f"{name}@{version}"
    # The build script installs the tree on the host and the Dockerfile must not fetch it again.
    assert "-d /src/node_modules/.bin ]" in dockerfile
    assert "--ignore-scripts" in dockerfile


@pytest.mark.parametrize("agent_type", TYPES)
def test_default_command_is_a_bin_of_the_pinned_package(agent_type: str) -> None:
    dockerfile = (IMAGES / agent_type / "Dockerfile").read_text()
    match = re.search(r"^CMD (\[.*\])$", dockerfile, re.M)
    assert match
    command = json.loads(match.group(1))[0]
    name, _ = _pin(agent_type)
    bins = _json(IMAGES / agent_type / "package-lock.json")["packages"][f"node_modules/{name}"]["bin"]
    assert command in bins
    script = SCRIPTS[0].read_text()
    assert f"[{agent_type}]={command}" in script, "build-agents.sh links each type's command for host tests"
