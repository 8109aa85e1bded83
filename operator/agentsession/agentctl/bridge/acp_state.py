"""What the agent said of itself and of its session, as far as agentctl's bounds go: its identity and capabilities
(from initialize), the current session, its modes and its last turn. Pure: it reads answers, it calls nothing.

One instance lives as long as the bridge; `clear` forgets it all when an attachment ends, so every part that holds
it sees the same state.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from agentsession.api.acp import (
    AgentIdentity,
    bounded_id,
    bounded_modes,
    config_option_modes,
    mode_config_option,
)

# What the bridge keeps of the agent's description of itself (`GET /api/v1/info`): its capabilities up to this size
# as JSON, else only whether it loads sessions; its API-key methods up to this many, ids up to MODE_ID_MAX_CHARS.
CAPABILITIES_MAX_BYTES = 16 * 1024
MAX_KEY_AUTH_METHODS = 8


def dump(model: Any) -> dict[str, Any]:
    """An SDK model as the wire has it (camelCase, no nulls)."""
    out: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return out


class AcpState:
    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.protocol_version: int | None = None
        self.agent_info: dict[str, Any] | None = None
        self.agent_capabilities: dict[str, Any] = {}
        # The agent's API-key methods (ACP `env_var` auth methods), in the order it prefers them.
        self.key_auth_methods: list[str] = []
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.current_mode_id: str | None = None
        self.available_modes: list[dict[str, Any]] = []
        # Set when the modes are the values of this config option (set with session/set_config_option).
        self.mode_config_id: str | None = None
        self.turn_started_at: str | None = None
        self.last_stop_reason: str | None = None

    @property
    def load_session(self) -> bool:
        return bool(self.agent_capabilities.get("loadSession"))

    def set_modes(self, modes: dict[str, Any] | None, config_options: Any) -> None:
        """Take the modes from a mode config option if there is one (ACP prefers it), else from `modes`;
        with neither, the modes known so far stay."""
        option = mode_config_option(config_options)
        if option is not None and bounded_id(option["id"]) is not None:
            self.mode_config_id = option["id"]
            self.current_mode_id = bounded_id(option.get("currentValue"))
            self.available_modes = [m.model_dump(exclude_none=True) for m in config_option_modes(option)]
        elif modes is not None:
            self.mode_config_id = None
            self.current_mode_id = bounded_id(modes.get("currentModeId"))
            self.available_modes = [
                m.model_dump(exclude_none=True) for m in bounded_modes(modes.get("availableModes") or [])
            ]

    def set_identity(self, answer: dict[str, Any]) -> None:
        """What the agent's answer to initialize says of it, as far as the bounds go."""
        info = answer.get("agentInfo")
        try:
            self.agent_info = (
                AgentIdentity.model_validate(info).model_dump(exclude_none=True) if info else None
            )
        except ValidationError:
            self.agent_info = None
        capabilities = answer.get("agentCapabilities") or {}
        if len(json.dumps(capabilities)) > CAPABILITIES_MAX_BYTES:
            capabilities = {"loadSession": bool(capabilities.get("loadSession"))}
        self.agent_capabilities = capabilities
        self.key_auth_methods = [
            m["id"]
            for m in answer.get("authMethods", [])
            if m.get("type") == "env_var" and bounded_id(m.get("id")) is not None
        ][:MAX_KEY_AUTH_METHODS]
