"""Fixtures for the Helm chart tests: the helm binary and a renderer.

helm comes from hack/tools/install.sh (a pinned PyPI wheel), else PATH. Without it the tests skip with the reason;
under `CI` or `AGENTSESSION_REQUIRE_CLUSTER=1` they fail, so a missing tool never passes as "all skipped".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import installed_tool
from tests.support.chart import CHART, Manifest, render_chart, run_helm

CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
__all__ = ["CHART", "CI_VALUES", "Manifest", "Render", "by_kind", "one", "run_helm"]


@pytest.fixture(scope="session")
def helm() -> str:
    return installed_tool("helm")


Render = Callable[..., list[Manifest]]


@pytest.fixture(scope="session")
def render(helm: str) -> Render:
    """`render(*values_files, release=..., namespace=..., set=[...], include_crds=False)` → the manifests."""

    def _render(*values_files: Path | str, **kw: object) -> list[Manifest]:
        return render_chart(helm, *values_files, **kw)  # type: ignore[arg-type]

    return _render


def by_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[Manifest], kind: str, name_suffix: str = "") -> Manifest:
    found = [m for m in by_kind(manifests, kind) if m["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, (
        f"expected one {kind} named *{name_suffix}, got {[m['metadata']['name'] for m in found]}"
    )
    return found[0]
