"""Metric names three ways: what each component's registry exports, what a PromQL expression reads, and what the
metrics reference (docs/observability.md) documents. The dashboard, the alerts, the docs and a real Prometheus are
checked against one another with these."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from tests.conftest import REPO_ROOT

METRICS_DOC = REPO_ROOT / "docs" / "observability.md"
# Series Prometheus writes for every target itself; no component exports them.
SCRAPE_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# The series of each metric type beside the family's own name.
_SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def registries() -> dict[str, Collector]:
    """Each component's registry as its /metrics serves it (the operator's is prometheus_client's default)."""
    from prometheus_client import REGISTRY

    import agentsession.controller.metrics  # noqa: F401  (registers the operator's metrics on REGISTRY)
    from agentsession.agentctl.metrics import Metrics
    from agentsession.gateway import metrics as gateway

    return {"operator": REGISTRY, "gateway": gateway.REGISTRY, "agentctl": Metrics().registry}


def families(registry: Collector | CollectorRegistry) -> dict[str, str]:
    """Exposition name → type of every family, labelled or not, sampled yet or not: a counter `x` is `x_total`,
    as in its `# TYPE` line."""
    return {f.name + ("_total" if f.type == "counter" else ""): f.type for f in registry.collect()}


def series_names(registry: Collector | CollectorRegistry) -> set[str]:
    """Every series name the registry's families can produce (`x_bucket`, `x_count`, ... of a histogram `x`)."""
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in _SERIES_SUFFIXES.get(family.type, ("",)))
    return names


def exported_series() -> set[str]:
    """What a query may name: every component's series, and the ones Prometheus adds for each scrape."""
    return set(SCRAPE_SERIES).union(*(series_names(r) for r in registries().values()))


_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana's $variables allowed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    names: set[str] = set()
    for found in re.finditer(r"(?<![\w.$])[A-Za-z_:][\w:]*", text):
        word = found.group(0)
        if word.lower() in _KEYWORDS or text[found.end() :].lstrip().startswith("("):
            continue  # a keyword, or a function's name
        names.add(word)
    return names


def documented_metrics(doc: Path = METRICS_DOC) -> dict[str, set[str]]:
    """Component → the metric names in the first column of the tables under its `### ` heading."""
    found: dict[str, set[str]] = {}
    section = None
    for line in doc.read_text().splitlines():
        if line.startswith("### "):
            section = line[4:].strip().split()[0].lower()
        elif line.startswith("|") and section is not None:
            first = line.split("|")[1]
            names = re.findall(r"`([a-z_:][a-z0-9_:]*)`", first)
            found.setdefault(section, set()).update(names)
        elif line.startswith("## "):
            section = None
    return found
