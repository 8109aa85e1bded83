"""What a wire dialect must provide; the two dialects implement it over the same events and commands."""

from __future__ import annotations

import json
from typing import Any, Protocol

from agentsession.gateway.commands import Command
from agentsession.gateway.events import ErrorCode, Event, Failure

Frame = dict[str, Any]


class Codec(Protocol):
    name: str

    def decode(self, text: str) -> Command | Failure:
        """A client frame → a command, or a Failure that says what is wrong with the frame."""

    def encode(self, event: Event) -> Frame | None:
        """An event → a frame for this dialect, or None when the dialect has nothing to say about it."""

    def hello(self, agents: list[dict[str, Any]], cluster: dict[str, dict[str, Any]]) -> Frame | None:
        """The frame sent right after connecting, given the agents the client may see and their cluster states."""

    def needs_subscription(self, event: Event) -> bool:
        """True for events that go only to clients that subscribed to the agent."""


def parse_object(text: str) -> dict[str, Any] | Failure:
    try:
        data = json.loads(text)
    except ValueError as exc:
        return Failure(ErrorCode.INVALID_JSON, f"message is not valid JSON: {exc}")
    except RecursionError:
        # The parser recurses once per array or object level; a frame may hold hundreds of thousands.
        return Failure(ErrorCode.INVALID_JSON, "message is not valid JSON: nested too deeply")
    if not isinstance(data, dict):
        return Failure(ErrorCode.BAD_REQUEST, "messages are JSON objects")
    return data


def string_field(
    fields: dict[str, Any], name: str, *, required: bool = True, max_len: int = 1 << 20
) -> str | None:
    """The string at `name`; raises ValueError with a message meant for the client."""
    value = fields.get(name)
    if value is None:
        if required:
            raise ValueError(f"missing required field {name!r}")
        return None
    if not isinstance(value, str):
        raise ValueError(f"field {name!r} must be a string, not {type(value).__name__}")
    if required and not value:
        raise ValueError(f"field {name!r} must not be empty")
    if len(value) > max_len:
        raise ValueError(f"field {name!r} is longer than {max_len} characters")
    return value


def utf8_size(text: str) -> int:
    """Bytes of `text` in UTF-8; a lone surrogate (JSON may carry one) counts as the three bytes it would take."""
    return len(text.encode("utf-8", "surrogatepass"))


def command_args(
    fields: dict[str, Any],
    required: tuple[str, ...],
    optional: tuple[str, ...],
    *,
    answer_field: str | None = None,
) -> dict[str, Any]:
    """A command's string fields from a frame's `fields`; with `answer_field` (a permission's answer), that option
    or `cancelled: true`, exactly one. Raises ValueError with a message meant for the client."""
    args: dict[str, Any] = {name: string_field(fields, name) for name in required}
    args.update((name, string_field(fields, name, required=False)) for name in optional)
    if answer_field is not None:
        cancelled = fields.get("cancelled", False)
        if not isinstance(cancelled, bool):
            raise ValueError("field 'cancelled' must be a boolean")
        if (args[answer_field] is None) == (not cancelled):
            raise ValueError(f"give exactly one of '{answer_field}' or 'cancelled: true'")
        args["cancelled"] = cancelled
    return args
