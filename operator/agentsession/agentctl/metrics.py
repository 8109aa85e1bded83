"""Prometheus metrics of one agentctl, in a registry of its own (tests run several in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter("agentctl_turns_total", "Prompt turns finished", ["stop_reason"], registry=r)
        self.turn_duration = Histogram(
            "agentctl_turn_duration_seconds",
            "Duration of prompt turns",
            buckets=(0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900),
            registry=r,
        )
        self.updates = Counter("agentctl_session_updates_total", "ACP session updates", ["type"], registry=r)
        self.permission_wait = Histogram(
            "agentctl_permission_wait_seconds",
            "Time permission requests waited for an answer",
            ["outcome"],
            buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900),
            registry=r,
        )
        self.errors = Counter("agentctl_errors_total", "Errors by kind", ["kind"], registry=r)
        self.stream_clients = Gauge(
            "agentctl_stream_clients", "Attached WebSocket clients", ["stream"], registry=r
        )
        self.http_requests = Counter(
            "agentctl_http_requests_total", "HTTP requests", ["method", "route", "status"], registry=r
        )
        self.agent_attachments = Counter(
            "agentctl_agent_attachments_total", "Agent (re)attachments", registry=r
        )
        self.journal_lines_skipped = Counter(
            "agentctl_journal_lines_skipped_total",
            "Journal lines readers skip, each counted once: oversized, unparsable, or out_of_order (a seq that"
            " does not follow the entries before it)",
            ["reason"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
