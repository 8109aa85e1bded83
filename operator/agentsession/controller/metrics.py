"""Prometheus metrics of the operator (served on /metrics by the metrics server in handlers)."""

from __future__ import annotations

from typing import get_args

from prometheus_client import Counter, Gauge, Histogram

from agentsession.api.models import Phase

STAGE_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)

SESSIONS = Gauge("agentsession_sessions", "AgentSessions by phase, as last reconciled.", ["phase"])
for _phase in get_args(Phase):
    # Every phase is exported from the start, at 0, so dashboards need not guess absent series.
    SESSIONS.labels(phase=_phase)
LEADER = Gauge(
    "agentsession_operator_leader",
    "1 while this operator acts (it holds the leader lease, or runs without election), 0 while it stands by.",
)
STARTUP_STAGE_SECONDS = Histogram(
    "agentsession_startup_stage_seconds",
    "Seconds from pod creation to each startup stage (scheduled, agentctl_ready, acp_initialized).",
    ["stage"],
    buckets=STAGE_BUCKETS,
)
RECONCILE_SECONDS = Histogram(
    "agentsession_reconcile_duration_seconds", "Duration of one reconcile of one AgentSession."
)
RECONCILE_ERRORS = Counter(
    "agentsession_reconcile_errors_total", "Reconciles that failed, by error kind.", ["kind"]
)
AGENTCTL_CALL_SECONDS = Histogram(
    "agentsession_agentctl_call_duration_seconds", "Latency of calls to agentctl.", ["call", "outcome"]
)
EVENTS_POSTED = Counter("agentsession_events_total", "Kubernetes Events posted, by type.", ["type"])
POOL_CLAIMS = Counter("agentsession_pool_claims_total", "Warm pods claimed by sessions, by pool.", ["pool"])
POOL_CLAIM_CONFLICTS = Counter(
    "agentsession_pool_claim_conflicts_total",
    "Claims of a warm pod that another session took first, by pool.",
    ["pool"],
)
POOL_MISSES = Counter(
    "agentsession_pool_misses_total",
    "Sessions with spec.poolRef that started cold, by pool and reason.",
    ["pool", "reason"],
)
POOL_PODS = Gauge(
    "agentsession_pool_pods", "Warm pods of each pool, by state (ready, starting).", ["pool", "state"]
)
POOL_REFILL_SECONDS = Histogram(
    "agentsession_pool_refill_seconds",
    "Seconds from a warm pod's creation to its Ready: how long a pool takes to refill.",
    ["pool"],
    buckets=STAGE_BUCKETS,
)
