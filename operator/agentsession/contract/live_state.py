"""How an agent's journal entries (its ACP updates, turn ends and errors) move its live state.

agentctl keeps the agent's current mode from the updates it relays, and the gateway keeps each agent's live state
from the entries it streams. Both read them through these functions, so a client of either sees the same mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agentsession.api.acp import bounded_id, mode_config_option


@dataclass(frozen=True)
class LiveState:
    """What an agent's agentctl said of it (its status and update stream); None fields are unknown."""

    agent_state: str | None = None  # stopped | starting | running | stopping | error
    turn_running: bool = False
    last_error: str | None = None
    current_mode_id: str | None = None


def mode_after(update: Mapping[str, Any], current: str | None) -> str | None:
    """The agent's current mode after one ACP `session/update`.

    A `current_mode_update` names it; a `config_option_update` carries it as the value of the agent's mode option
    (ACP prefers that option to `modes`). An id past its bound names nothing, so it leaves the mode as it was, as
    does any other update.
    """
    kind = update.get("sessionUpdate")
    if kind == "current_mode_update":
        return bounded_id(update.get("currentModeId")) or current
    if kind == "config_option_update":
        option = mode_config_option(update.get("configOptions"))
        if option is not None and bounded_id(option["id"]) is not None:
            return bounded_id(option.get("currentValue"))
    return current


def after_entry(live: LiveState, kind: str, notification: Mapping[str, Any]) -> LiveState:
    """The live state once a journal entry of `kind` has been delivered: a prompt starts a turn, its end ends
    it, and an agent's error ends it as well and says why."""
    if kind == "session_update":
        update = notification.get("update")
        if not isinstance(update, Mapping):
            return live
        live = replace(live, current_mode_id=mode_after(update, live.current_mode_id))
        if update.get("sessionUpdate") == "user_message_chunk":
            return replace(live, agent_state=live.agent_state or "running", turn_running=True)
        return live
    if kind == "turn_end":
        return replace(live, turn_running=False)
    if kind == "agent_error":
        return replace(
            live,
            agent_state="error",
            turn_running=False,
            last_error=str(notification.get("message") or notification),
        )
    return live
