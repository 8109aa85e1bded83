"""What the stub model says, decided from the latest user message alone, so every run of a test is the same.

Cues (case-insensitive, looked up in the latest text the user typed):

- `write NAME` (NAME a plain file name such as `hello.txt`, no directories): the model calls the agent's
  file-writing tool so that NAME is created in the session's working directory with `WRITE_CONTENT`. When the
  tool result comes back it says `Wrote NAME`, or `Not written` if the result says the call was rejected or
  failed.
- `slow`: the reply is streamed one chunk every `SLOW_INTERVAL` seconds for up to `SLOW_DURATION` seconds, so a
  client can cancel mid-turn.
- anything else: `Hello from the model stub. You said: TEXT`, streamed in several chunks.

Requests that are not a user's turn (an agent's title or topic generation, quota probes) get `SIDE_REPLY`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WRITE_CONTENT = "Written by the model stub.\n"
SIDE_REPLY = "Stub session"
SLOW_INTERVAL = 0.3
SLOW_DURATION = 60.0
TEXT_CHUNKS = 4

_WRITE_CUE = re.compile(r"\bwrite\s+([A-Za-z0-9_][A-Za-z0-9._-]*)", re.IGNORECASE)
_SLOW_CUE = re.compile(r"\bslow\b", re.IGNORECASE)
# Words agents put in a tool result when the user said no; an error result counts as not written either way.
_REFUSAL = re.compile(r"reject|denied|declined|not approved|doesn't want to proceed|aborted", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ToolResult:
    text: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Exchange:
    """What an API request asks of the model, independent of the API's wire format."""

    prompt: str
    """The latest text the user typed (tool results excluded)."""
    prompts: tuple[str, ...] = ()
    """Every text the user typed in the conversation, oldest first: what the agent remembers of it."""
    tool_result: ToolResult | None = None
    """Set when the request answers the model's own tool call."""
    workdir: str | None = None
    """The session's working directory, as the agent described its environment."""
    side: bool = False
    """A request the agent makes for itself (titles, quota checks), not a turn of the conversation."""

    @property
    def kind(self) -> str:
        if self.side:
            return "side"
        return "tool_result" if self.tool_result is not None else "prompt"


@dataclass(frozen=True, slots=True)
class FileWrite:
    name: str
    content: str = WRITE_CONTENT

    def path_in(self, workdir: str) -> str:
        return f"{workdir.rstrip('/')}/{self.name}"


@dataclass(frozen=True, slots=True)
class Reply:
    chunks: tuple[str, ...]
    interval: float = 0.0
    """Seconds to wait before each chunk after the first."""
    write: FileWrite | None = None
    """A tool call the model makes after its text."""

    @property
    def text(self) -> str:
        return "".join(self.chunks)


def write_target(prompt: str) -> str | None:
    match = _WRITE_CUE.search(prompt)
    return match.group(1).rstrip(".") if match else None


def split_chunks(text: str, count: int = TEXT_CHUNKS) -> tuple[str, ...]:
    """Cuts `text` at word boundaries into about `count` pieces that join back to it exactly."""
    words = re.findall(r"\S+\s*|\s+", text)
    size = max(1, -(-len(words) // count))
    return tuple("".join(words[i : i + size]) for i in range(0, len(words), size)) or ("",)


def _slow_reply() -> Reply:
    count = int(SLOW_DURATION / SLOW_INTERVAL)
    return Reply(tuple(f"Slow chunk {i + 1}. " for i in range(count)), interval=SLOW_INTERVAL)


def reply_to(exchange: Exchange) -> Reply:
    if exchange.side:
        return Reply((SIDE_REPLY,))
    name = write_target(exchange.prompt)
    if exchange.tool_result is not None:
        result = exchange.tool_result
        refused = result.is_error or bool(_REFUSAL.search(result.text))
        return Reply(("Not written" if refused or name is None else f"Wrote {name}",))
    if name is not None:
        return Reply((f"Writing {name}.",), write=FileWrite(name))
    if _SLOW_CUE.search(exchange.prompt):
        return _slow_reply()
    return Reply(split_chunks(f"Hello from the model stub. You said: {exchange.prompt}"))
