"""Prometheus metrics of the egress proxy, on a registry of its own. Labels are bounded: namespace, agent type,
a price-table pattern or "other" for the model, never a session's name or a host."""

from __future__ import annotations

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from agentsession.process_metrics import process_registry

REGISTRY = process_registry()

REQUESTS = Counter(
    "agentsession_egress_requests_total",
    "Requests through the proxy, by kind (model, connect, http, git)",
    ["namespace", "agent_type", "kind"],
    registry=REGISTRY,
)
DENIED = Counter(
    "agentsession_egress_denied_total",
    "Requests the proxy refused, by reason",
    ["namespace", "reason"],
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "agentsession_model_tokens_total",
    "Model tokens metered from the providers' answers, by kind (input, output, cached)",
    ["namespace", "agent_type", "model", "kind"],
    registry=REGISTRY,
)
MODEL_COST = Counter(
    "agentsession_model_cost_usd_total",
    "Cost of model calls in US dollars, from the price table",
    ["namespace", "agent_type", "model"],
    registry=REGISTRY,
)
MODEL_REQUESTS = Counter(
    "agentsession_model_requests_total",
    "Model calls answered by the provider",
    ["namespace", "agent_type", "model"],
    registry=REGISTRY,
)
BYTES = Counter(
    "agentsession_egress_bytes_total",
    "Bytes relayed: upstream (from agents outwards) and downstream (back to agents)",
    ["direction"],
    registry=REGISTRY,
)
CONNECTIONS = Gauge(
    "agentsession_egress_connections",
    "Open upstream exchanges: tunnels and proxied requests",
    registry=REGISTRY,
)
FIRST_BYTE = Histogram(
    "agentsession_model_first_byte_seconds",
    "From a model request's arrival to the first byte of the provider's answer",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
USAGE_WRITES = Counter(
    "agentsession_egress_usage_writes_total",
    "Writes of status.usage, by outcome (written, conflict, gone, error)",
    ["outcome"],
    registry=REGISTRY,
)


def render() -> bytes:
    return generate_latest(REGISTRY)
