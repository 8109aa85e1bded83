"""Prometheus metrics of the gateway, on a registry of its own (tests start several gateways in one process)."""

from __future__ import annotations

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from agentsession.process_metrics import process_registry

REGISTRY = process_registry()

CONNECTIONS = Gauge(
    "agentsession_gateway_connections", "Open client WebSocket connections", ["dialect"], registry=REGISTRY
)
MESSAGES = Counter(
    "agentsession_gateway_messages_total",
    "Client messages by direction and type",
    ["direction", "type"],
    registry=REGISTRY,
)
DELIVERY_SECONDS = Histogram(
    "agentsession_gateway_event_delivery_seconds",
    "From observing a change (watch event or agentctl frame) to handing it to a client socket",
    ["event"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY,
)
UPSTREAM_STREAMS = Gauge(
    "agentsession_gateway_upstream_streams",
    "Open WebSocket streams to agentctl instances",
    ["stream"],
    registry=REGISTRY,
)
UPSTREAM_RECONNECTS = Counter(
    "agentsession_gateway_upstream_reconnects_total",
    "Upstream stream reconnects",
    ["stream"],
    registry=REGISTRY,
)
SLOW_CONSUMERS = Counter(
    "agentsession_gateway_slow_consumers_total", "Clients dropped for not reading", registry=REGISTRY
)
AUTH_DECISIONS = Counter(
    "agentsession_gateway_auth_total",
    "Authentication and authorization outcomes",
    ["result"],
    registry=REGISTRY,
)
WATCH_EVENTS = Counter(
    "agentsession_gateway_watch_events_total", "AgentSession changes seen", ["type"], registry=REGISTRY
)
WATCH_RESTARTS = Counter(
    "agentsession_gateway_watch_restarts_total", "AgentSession watch restarts after errors", registry=REGISTRY
)
INITIALIZATIONS = Counter(
    "agentsession_gateway_initializations_total",
    "initialize requests by outcome",
    ["outcome"],
    registry=REGISTRY,
)


def render() -> bytes:
    return generate_latest(REGISTRY)
