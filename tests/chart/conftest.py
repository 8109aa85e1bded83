"""Fixtures for the Helm chart tests: the helm binary and a renderer.

helm comes from hack/tools/install.sh (a pinned PyPI wheel), else PATH. Without it the tests skip with the reason;
under `CI` or `AGENTSESSION_REQUIRE_CLUSTER=1` they fail, so a missing tool never passes as "all skipped".
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT, installed_tool

CHART = REPO_ROOT / "charts" / "agentsession"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))

Manifest = dict[str, Any]


@pytest.fixture(scope="session")
def helm() -> str:
    return installed_tool("helm")


def run_helm(
    helm: str, *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        pytest.fail(
            f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}", pytrace=False
        )
    return proc


Render = Callable[..., list[Manifest]]


@pytest.fixture(scope="session")
def render(helm: str) -> Render:
    """`render(*values_files, release=..., namespace=..., set=[...], include_crds=False)` → the manifests."""

    def _render(
        *values_files: Path | str,
        release: str = "agentsession",
        namespace: str = "agentsession-system",
        set: tuple[str, ...] | list[str] = (),
        include_crds: bool = False,
    ) -> list[Manifest]:
        args = ["template", release, str(CHART), "--namespace", namespace]
        for f in values_files:
            args += ["-f", str(f)]
        for s in set:
            args += ["--set", s]
        if include_crds:
            args.append("--include-crds")
        out = run_helm(helm, *args).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]

    return _render


def by_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[Manifest], kind: str, name_suffix: str = "") -> Manifest:
    found = [m for m in by_kind(manifests, kind) if m["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (
        f"expected one {kind} named *{name_suffix}, got {[m['metadata']['name'] for m in found]}"
    )
    return found[0]
