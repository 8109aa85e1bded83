"""A message transport for the ACP SDK over the agent's byte pipes.

The SDK's own newline transport drops lines it cannot parse without telling anyone; agentctl must report an
agent that prints garbage, and must see each message in arrival order (so the journal order equals the agent's
order). This transport does both, and hands on to the SDK's connection, unchanged, every message that the
bridge has not dealt with in full.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from agentsession.agentctl.transport import AgentPipes


class AgentChannel:
    def __init__(
        self,
        pipes: AgentPipes,
        on_message: Callable[[dict[str, Any]], bool],
        on_garbage: Callable[[bytes], None],
        on_eof: Callable[[], None],
    ) -> None:
        self._reader = pipes.reader
        self._writer = pipes.writer
        self._on_message = on_message
        self._on_garbage = on_garbage
        self._on_eof = on_eof
        self.eof = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        if self._writer.is_closing() or self.eof.is_set():
            raise ConnectionError("the agent's input is closed")
        self._writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if line is None:
                # Called before the SDK fails the pending requests, so the bridge still sees the turn running.
                self._on_eof()
                self.eof.set()
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self._on_garbage(line)
                continue
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                self._on_garbage(line)
                continue
            if self._on_message(message):
                continue
            return message

    async def _read_line(self) -> bytes | None:
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None
        except asyncio.LimitOverrunError as exc:
            # A line longer than the limit cannot be a message we can handle; drop it and say so.
            await self._reader.readexactly(exc.consumed)
            return b"<oversized line>"
        except (ConnectionError, OSError):
            return None

    async def close(self) -> None:
        if not self._writer.is_closing():
            self._writer.close()
