"""The agent's messages as the channel reads them, in arrival order: each session/update journaled as it came,
what it says of the session's modes kept, and the lines agentctl refused reported.

The SDK would only validate each update and pass it to a no-op handler, in a task of its own that can reorder
them; one that does not validate (a newer kind, a field the SDK's models reject) it would log with a traceback
and drop. Here the journal keeps it, and the log says so once per kind. A new update kind that changes what the
bridge reports (usage, ...) is read in `on_message`, through the reducer of `contract.live_state` that the
gateway reads too.
"""

from __future__ import annotations

import json
import typing
from typing import Any, Literal, cast

from acp.schema import SessionNotification
from pydantic import ValidationError

from agentsession.agentctl.agent_input import Refusal, preview
from agentsession.agentctl.bridge import log
from agentsession.agentctl.bridge.acp_state import AcpState
from agentsession.agentctl.bridge.agent_errors import AgentErrors
from agentsession.agentctl.events import EventHub
from agentsession.agentctl.metrics import Metrics
from agentsession.agentctl.session_store import SessionStore
from agentsession.contract.live_state import mode_after

MAX_GARBAGE_REPORTS = 20
# Updates that belong to the conversation, as a session/load replays it; the others describe the session now.
CONVERSATION_KINDS = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
    }
)
ReplayFilter = Literal["off", "all", "conversation"]
# Update kinds are the agent's strings: past this many, invalid ones are journaled without a warning; each is
# remembered, logged and counted cut to KIND_MAX_CHARS.
MAX_INVALID_KINDS = 50
KIND_MAX_CHARS = 100
# The kinds of session/update the ACP schema knows, each a label of agentctl_session_updates_total; any other kind
# counts as "unknown", so the agent cannot add series to the metrics.
KNOWN_KINDS = frozenset(
    kind
    for variant in typing.get_args(SessionNotification.model_fields["update"].annotation)
    for kind in typing.get_args(variant.model_fields["session_update"].annotation)
)


class MessageIntake:
    def __init__(
        self, acp: AcpState, store: SessionStore, hub: EventHub, metrics: Metrics, errors: AgentErrors
    ) -> None:
        self._acp = acp
        self._store = store
        self._hub = hub
        self._metrics = metrics
        self._errors = errors
        # What of the updates a session/load replays is not journaled again (set by session/load, cleared by a
        # turn or another session).
        self.replay: ReplayFilter = "off"
        self._garbage_reports = 0
        self._invalid_kinds: set[str] = set()

    def attached(self) -> None:
        """A new attachment: its garbage is reported afresh."""
        self._garbage_reports = 0

    def on_message(self, message: dict[str, Any]) -> bool:
        """Journal a session/update as it came; True when the message is done with and the SDK must not get it."""
        if message.get("method") != "session/update" or "id" in message:
            return False
        params = message.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict) or not isinstance(update.get("sessionUpdate"), str):
            shown = preview(json.dumps(params).encode())
            self._errors.record(f"agent sent a malformed session/update: {shown}", "agent_protocol")
            return True
        kind = update["sessionUpdate"]
        try:
            SessionNotification.model_validate(params)
        except ValidationError as exc:
            self._warn_invalid(kind[:KIND_MAX_CHARS], exc)
        acp = self._acp
        if kind == "config_option_update":
            # The option's values are the modes on offer as well.
            acp.set_modes(None, update.get("configOptions"))
        acp.current_mode_id = mode_after(update, acp.current_mode_id)
        record = self._store.record
        if acp.current_mode_id not in (None, record.mode_id):
            # A mode the agent chose itself is the one to restore on resume, not the last one agentctl set.
            record.mode_id = acp.current_mode_id
            self._store.save()
        if self.replay == "all" or (self.replay == "conversation" and kind in CONVERSATION_KINDS):
            # session/load replays what the journal already holds; journaling it again would duplicate it.
            self._metrics.updates.labels("replayed").inc()
            return True
        self._metrics.updates.labels(kind if kind in KNOWN_KINDS else "unknown").inc()
        self._hub.publish("session_update", cast(dict[str, Any], params))
        return True

    def _warn_invalid(self, kind: str, exc: ValidationError) -> None:
        if kind in self._invalid_kinds or len(self._invalid_kinds) >= MAX_INVALID_KINDS:
            return
        self._invalid_kinds.add(kind)
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        log.warning(
            "agent sent a session/update of kind %r that the ACP schema of this agentctl does not accept"
            " (%s: %s); journaled as sent, and further ones of this kind are not reported",
            kind,
            where[:300],
            first["msg"][:300],
            extra={"kind": kind},
        )

    def on_refused(self, refusal: Refusal) -> None:
        self._garbage_reports += 1
        if self._garbage_reports > MAX_GARBAGE_REPORTS:
            self._metrics.errors.labels("agent_protocol").inc()
            return
        answered = ""
        if refusal.answerable:
            answered = "; answered with an error" if refusal.request else "; taken as an error answer"
        self._errors.record(
            f"agent wrote a line to stdout that is not JSON-RPC agentctl accepts ({refusal.reason}){answered}",
            "agent_protocol",
        )
