"""The chart's alerts under promtool, and the metrics reference against the code.

- The PrometheusRule, rendered by helm, passes `promtool check rules`, and every alert has `promtool test rules`
  cases in tests/chart/alerts/ (one where it fires, with its labels and text, and one where it stays quiet), which
  pass.
- docs/observability.md names exactly the metrics the operator, the gateway and agentctl export.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import CHART, Render, one
from tests.conftest import require_tool
from tests.support.metric_names import documented_metrics, families, metric_names, registries

ALERT_TESTS = Path(__file__).parent / "alerts"
MONITORING = CHART / "ci" / "monitoring-values.yaml"


@pytest.fixture(scope="module")
def promtool() -> str:
    return require_tool("promtool")


@pytest.fixture(scope="module")
def rule_groups(render: Render) -> list[dict[str, Any]]:
    """The rule groups of the chart's PrometheusRule for release agentsession in agentsession-system, as the alert
    tests expect them."""
    groups: list[dict[str, Any]] = one(render(MONITORING), "PrometheusRule")["spec"]["groups"]
    return groups


@pytest.fixture
def rule_dir(tmp_path: Path, rule_groups: list[dict[str, Any]]) -> Path:
    """rules.yaml (the rendered rules) beside copies of the alert tests, which name it."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups}, width=1000))
    for test in ALERT_TESTS.glob("*.yaml"):
        shutil.copy(test, tmp_path)
    return tmp_path


def promtool_run(promtool: str, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=where, capture_output=True, text=True, timeout=60, check=False
    )


def test_rendered_rules_pass_promtool_check(promtool: str, rule_dir: Path) -> None:
    checked = promtool_run(promtool, rule_dir, "check", "rules", "rules.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 10 rules found" in checked.stdout, checked.stdout


def test_every_alert_has_cases_that_fire_and_cases_that_stay_quiet(rule_groups: list[dict[str, Any]]) -> None:
    alerts = {r["alert"] for g in rule_groups for r in g["rules"] if "alert" in r}
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in ALERT_TESTS.glob("*.yaml"):
        tests = yaml.safe_load(path.read_text())
        assert tests["rule_files"] == ["rules.yaml"], path
        for case in tests["tests"]:
            for check in case["alert_rule_test"]:
                (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    assert alerts - firing == set(), "alerts no test sees firing"
    assert alerts - quiet == set(), "alerts no test sees staying quiet"
    assert (firing | quiet) - alerts == set(), "tests of alerts the chart does not have"


def test_alert_unit_tests_pass(promtool: str, rule_dir: Path) -> None:
    tests = sorted(p.name for p in ALERT_TESTS.glob("*.yaml"))
    ran = promtool_run(promtool, rule_dir, "test", "rules", *tests)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.count("SUCCESS") == len(tests), ran.stdout


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum(agentsession_sessions{namespace=~"$namespace",phase="Ready"})', {"agentsession_sessions"}),
        (
            "histogram_quantile(0.99, sum by (le, stage) "
            '(rate(agentsession_startup_stage_seconds_bucket{stage="a"}[$__rate_interval])))',
            {"agentsession_startup_stage_seconds_bucket"},
        ),
        ('absent(up{service="x"} == 1)', {"up"}),
        ("sum(rate(a_total[10m])) / sum(rate(b_count[10m])) > 0.5", {"a_total", "b_count"}),
        ("rate(x_total[5m] offset 1h) * 900 > 1e3 and on (pod) y", {"x_total", "y"}),
        ('count without (instance) (z{le="+Inf"}) > bool 2', {"z"}),
    ],
)
def test_metric_names_of_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_metrics_reference_names_exactly_what_the_components_export() -> None:
    documented = documented_metrics()
    process = documented.pop("process")
    for component, registry in registries().items():
        exported = set(families(registry))
        own = {n for n in exported if n.startswith(("agentsession_", "agentctl_"))}
        assert documented[component] == own, f"docs/observability.md, section {component}"
        if component != "agentctl":
            assert process <= exported, f"{component} lacks process metrics: {process - exported}"
