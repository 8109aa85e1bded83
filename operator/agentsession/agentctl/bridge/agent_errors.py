"""The agent's errors: the last one, for `GET /api/v1/status`, and each reported one journaled as an
`agent_error` entry, counted and logged."""

from __future__ import annotations

from collections.abc import Callable

from agentsession.agentctl.bridge import log
from agentsession.agentctl.clock import utc_now
from agentsession.agentctl.events import EventHub
from agentsession.agentctl.metrics import Metrics

# last_error and the agent_error entries hold text the agent chose (its error messages, its stderr): cut to this.
ERROR_MAX_CHARS = 4000


class AgentErrors:
    def __init__(self, hub: EventHub, metrics: Metrics, session_id: Callable[[], str | None]) -> None:
        self._hub = hub
        self._metrics = metrics
        self._session_id = session_id
        self.last_error: str | None = None
        self.last_error_at: str | None = None

    def note(self, message: str) -> None:
        """The last error only: a failed call its caller hears of, which the journal does not keep."""
        self.last_error, self.last_error_at = message, utc_now()

    def record(self, message: str, kind: str) -> None:
        """An error nobody asked about (the agent's exit, its garbage): the last error, journaled and counted."""
        if len(message) > ERROR_MAX_CHARS:
            message = message[:ERROR_MAX_CHARS] + "..."
        self.note(message)
        self._metrics.errors.labels(kind).inc()
        self._hub.publish(
            "agent_error", {"error": kind, "message": message, "session_id": self._session_id()}
        )
        log.warning("agent error: %s", message, extra={"kind": kind})
