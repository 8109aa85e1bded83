"""What the ACP bridge needs from a transport: a byte stream pair to the agent, and news of its exit."""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass, field
from typing import Any

# The longest line agentctl reads from the agent: ACP messages carry images and whole files (a screenshot, a file the
# agent wrote), a few MiB at most. A longer line is skipped unread (`channel.AgentChannel`); the reader buffers at
# most twice this. An update is stored cut to 1 MiB anyway (ENTRY_MAX_BYTES), and a line of N MiB costs agentctl
# about 4N MiB while it is read, parsed and journaled. The SDK's own default, 50 MiB, took agentctl to 251 MiB.
LINE_LIMIT = 8 * 1024 * 1024


@dataclass(slots=True)
class AgentPipes:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pid: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


class AgentTransport(abc.ABC):
    name: str

    @abc.abstractmethod
    async def attach(self) -> AgentPipes:
        """Connect to a (new) agent; wait as long as it takes (the caller applies a timeout)."""

    @abc.abstractmethod
    async def detach(self, *, stop_agent: bool) -> None:
        """Drop the current connection; with stop_agent, make the agent exit if this transport can."""

    @abc.abstractmethod
    async def exit_reason(self) -> str:
        """After EOF from the agent: a short description of how it ended, for status and the stream."""

    @abc.abstractmethod
    async def agent_present(self) -> None:
        """Returns once an attach opened early (`FifoTransport.open_early`) has found the agent; at once when none
        is under way."""

    def describe(self) -> dict[str, Any]:
        return {"transport": self.name}
