"""Client requests after decoding: the dialect-neutral commands the gateway executes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    action: str
    agent_id: str | None
    args: dict[str, Any]
    request_id: str | None = None
    envelope_id: str | None = None


# Actions the core understands; each dialect maps its own message names onto these.
INITIALIZE = "initialize"
SUBSCRIBE = "subscribe"
PROMPT = "prompt"
SET_MODE = "set_mode"
CANCEL = "cancel"
SUSPEND = "suspend"
PERMISSION_RESPONSE = "permission_response"
SHELL_STATUS = "shell_status"
SHELL_SUBSCRIBE = "shell_subscribe"
SHELL_UNSUBSCRIBE = "shell_unsubscribe"
SHELL_INPUT = "shell_input"
LIST = "list"
PING = "ping"
