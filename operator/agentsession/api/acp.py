"""What an agent says about itself over ACP (its name, its modes, its session id), bounded.

These reach every client and the AgentSession's status, so the session's API and agentctl's wire bodies share
them; they are the project's vocabulary of ACP, not one side's.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

# What the agent says about itself (its name, its modes, its session id) reaches every client and the AgentSession's
# status, so each string is bounded, and the modes in count and in bytes. Real agents stay far below: ids of a word
# or two, names of a few words, descriptions of a sentence or two. Display strings past their bound are cut (and end
# in ELLIPSIS); an id past its bound is not the agent's id any more, so what it names is left out instead.
SESSION_ID_MAX_CHARS = 512
MODE_ID_MAX_CHARS = 256
LABEL_MAX_CHARS = 256
DESCRIPTION_MAX_CHARS = 2048
MODES_MAX = 64
MODES_MAX_BYTES = 32 * 1024
ELLIPSIS = "\u2026"


def cut_text(value: Any, limit: int) -> Any:
    """A string longer than `limit` characters cut to `limit` (its last one ELLIPSIS); anything else as it is."""
    if isinstance(value, str) and len(value) > limit:
        return value[: limit - 1] + ELLIPSIS
    return value


def bounded_id(value: Any, limit: int = MODE_ID_MAX_CHARS) -> str | None:
    """An id the agent gave, or None when it is not a string of at most `limit` characters."""
    return value if isinstance(value, str) and len(value) <= limit else None


Label = Annotated[
    str, BeforeValidator(lambda v: cut_text(v, LABEL_MAX_CHARS)), Field(max_length=LABEL_MAX_CHARS)
]
Description = Annotated[
    str,
    BeforeValidator(lambda v: cut_text(v, DESCRIPTION_MAX_CHARS)),
    Field(max_length=DESCRIPTION_MAX_CHARS),
]
ModeId = Annotated[str, Field(max_length=MODE_ID_MAX_CHARS)]
CurrentModeId = Annotated[ModeId | None, BeforeValidator(bounded_id)]
SessionId = Annotated[str, Field(max_length=SESSION_ID_MAX_CHARS)]


class SessionMode(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: ModeId
    name: Label
    description: Description | None = None


def bounded_modes(value: Any) -> Any:
    """The agent's modes as far as the bounds go: in order, at most MODES_MAX of them and MODES_MAX_BYTES (as
    JSON), each mode's strings cut; a mode that is not one (no name, an id past its bound) is left out."""
    if not isinstance(value, list):
        return value
    kept: list[SessionMode] = []
    size = 0
    for item in value:
        if len(kept) == MODES_MAX:
            break
        try:
            mode = SessionMode.model_validate(item)
        except ValidationError:
            continue
        size += len(mode.model_dump_json(exclude_none=True).encode())
        if size > MODES_MAX_BYTES:
            break
        kept.append(mode)
    return kept


Modes = Annotated[list[SessionMode], BeforeValidator(bounded_modes), Field(max_length=MODES_MAX)]


def mode_config_option(config_options: Any) -> dict[str, Any] | None:
    """The select option of category "mode" in an ACP `configOptions` list (JSON), if the agent offers one.

    Agents such as Codex offer their modes only this way; ACP says a client prefers it to `modes`.
    """
    if not isinstance(config_options, list):
        return None
    for option in config_options:
        if (
            isinstance(option, dict)
            and option.get("category") == "mode"
            and option.get("type") == "select"
            and isinstance(option.get("id"), str)
        ):
            return option
    return None


def config_option_modes(option: dict[str, Any]) -> list[SessionMode]:
    """The values of a select config option as modes (grouped values flattened in their order), as far as the
    bounds of `bounded_modes` go."""
    items = option.get("options")
    values: list[Any] = []
    for item in items if isinstance(items, list) else []:
        grouped = item.get("options") if isinstance(item, dict) and "group" in item else None
        values.extend(grouped if isinstance(grouped, list) else [item])
    modes: list[dict[str, Any]] = []
    for v in values:
        if isinstance(v, dict) and isinstance(v.get("value"), str):
            name, description = v.get("name"), v.get("description")
            modes.append(
                {
                    "id": v["value"],
                    "name": name if isinstance(name, str) and name else v["value"],
                    "description": description if isinstance(description, str) else None,
                }
            )
    kept: list[SessionMode] = bounded_modes(modes)
    return kept


class AgentIdentity(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: Label
    title: Label | None = None
    version: Label | None = None
