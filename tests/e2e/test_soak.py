"""The soak run of `make soak`, short: a minute of churn with 3 sessions at a time on a node, prompts through a real
gateway, every invariant checked each second. The 30-minute run and its figures are in docs/benchmarks.md.

The run makes its own namespace (`bench-*`, which no test operator watches), its own operator and gateway
processes, and removes all of it at the end: about two minutes in all.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from benchmarks.soak import report
from benchmarks.soak.driver import SoakConfig, run

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]


@pytest.mark.timeout(280)
async def test_a_minute_of_churn_through_the_gateway_breaks_no_invariant(
    kubeconfig: str,
    kubectl: str,
    crd_installed: list[str],
    project_image: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The run makes its namespace with kubectl, as the other benchmarks do.
    monkeypatch.setenv("PATH", f"{Path(kubectl).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    config = SoakConfig(
        kubeconfig=kubeconfig,
        minutes=1.0,
        sessions=3,
        seed=7,
        sample_seconds=5.0,
        image=project_image,
        out_dir=tmp_path,
    )
    result = await run(config)
    report.plot(result, tmp_path / "memory.svg")
    print(report.summary(result))

    assert result.violations == [], "\n".join(v.line() for v in result.violations)
    # Each slot went through at least one whole cycle: two prompts each, through the gateway.
    assert result.cycles >= 3
    assert result.prompts == 2 * result.cycles
    assert {s.process for s in result.samples} == {"operator", "gateway", "agentctl"}
    assert len((tmp_path / "memory.csv").read_text().splitlines()) == 1 + len(result.samples)
    assert (tmp_path / "memory.svg").read_text().startswith("<svg")
