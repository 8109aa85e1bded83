"""One version of an AgentSession as the gateway reads it, built once when the watch delivers that version.

The session cache keeps these, so however many readers ask about one watch event (its status change, the update
stream it opens, the requests it answers), the status is validated once and the cluster's side a client is shown
is computed once.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from agentsession.api.manifest import Key, Manifest
from agentsession.api.views import SessionView
from agentsession.contract.live_state import LiveState
from agentsession.gateway.status import agent_id, agent_info, cluster_state


class Session:
    """A version of an AgentSession; `deleted` once the API server has deleted it (the last version seen)."""

    def __init__(self, view: SessionView, *, deleted: bool = False) -> None:
        self.view = view
        self.deleted = deleted

    @classmethod
    def of(cls, body: Manifest) -> Session:
        return cls(SessionView(body))

    def gone(self) -> Session:
        """This version as the last one of a deleted session: shown as killed."""
        return Session(self.view, deleted=True)

    @property
    def body(self) -> Manifest:
        return self.view.body

    @property
    def key(self) -> Key:
        return self.view.key

    @property
    def namespace(self) -> str:
        return self.view.namespace

    @cached_property
    def id(self) -> str:
        return agent_id(*self.key)

    @cached_property
    def agentctl_ready(self) -> bool:
        return self.view.condition_true("AgentctlReady")

    @cached_property
    def initialized(self) -> bool:
        return self.view.condition_true("AgentInitialized")

    @cached_property
    def cluster(self) -> dict[str, Any]:
        """`status.cluster_state`: the same for every client and every publish of this version."""
        return cluster_state(self.view)

    def info(self, live: LiveState | None) -> dict[str, Any]:
        return agent_info(self.view, live, deleted=self.deleted)
