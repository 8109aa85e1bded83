"""A message transport for the ACP SDK over the agent's byte pipes.

The SDK's own newline transport drops lines it cannot parse without telling anyone, joins the pieces of a line of
any length, and ends its receive loop on the first exception a line raises (a RecursionError from a deeply nested
one); agentctl must report an agent that prints garbage, stay within its memory, keep the session going past a bad
line, and see each message in arrival order (so the journal order equals the agent's order). This transport does
all of that (`agent_input` says what a line may be), and hands on to the SDK's connection, unchanged, every message
that the bridge has not dealt with in full.

A refused line whose id can be told is answered as JSON-RPC would: a request of the agent's gets an error answer,
and an answer of the agent's to a call of agentctl's becomes an error answer to that call (code REFUSED_ANSWER), so
that neither side waits for an answer that will not come.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentsession.agentctl.agent_input import (
    HEAD_BYTES,
    INVALID_REQUEST,
    MIB,
    REFUSED_ANSWER,
    Refusal,
    error_response,
    oversized,
    parse_message,
    refuse_head,
)
from agentsession.agentctl.transport import LINE_LIMIT, AgentPipes

# How much of an oversized line is taken out of the reader's buffer at a time while skipping it.
SKIP_CHUNK = MIB
# Past this much unwritten input of the agent's, its refused requests are not answered any more.
ANSWERS_BUFFER_MAX = MIB


@dataclass(frozen=True, slots=True)
class _Oversized:
    head: bytes
    size: int


class AgentChannel:
    def __init__(
        self,
        pipes: AgentPipes,
        on_message: Callable[[dict[str, Any]], bool],
        on_refused: Callable[[Refusal], None],
        on_eof: Callable[[], None],
    ) -> None:
        self._reader = pipes.reader
        self._writer = pipes.writer
        self._on_message = on_message
        self._on_refused = on_refused
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
            if isinstance(line, _Oversized):
                parsed: dict[str, Any] | Refusal = refuse_head(line.head, oversized(line.size, LINE_LIMIT))
            else:
                line = line.strip()
                if not line:
                    continue
                parsed = parse_message(line)
            if isinstance(parsed, Refusal):
                self._on_refused(parsed)
                answer = self._answer_refused(parsed)
                if answer is not None:
                    return answer
                continue
            if self._on_message(parsed):
                continue
            return parsed

    def _answer_refused(self, refusal: Refusal) -> dict[str, Any] | None:
        """Answers a refused request of the agent's; returns the error answer that stands in for a refused answer."""
        if not refusal.answerable:
            return None
        if not refusal.request:
            return error_response(refusal.id, REFUSED_ANSWER, refusal.reason)
        # Written without waiting: reading the agent's output must not stop while the agent does not read its
        # input; an agent that lets its input fill up gets no more of these answers.
        if (
            not self._writer.is_closing()
            and self._writer.transport.get_write_buffer_size() < ANSWERS_BUFFER_MAX
        ):
            answer = error_response(
                refusal.id, INVALID_REQUEST, f"agentctl refused the request: {refusal.reason}"
            )
            self._writer.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
        return None

    async def _read_line(self) -> bytes | _Oversized | None:
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None
        except asyncio.LimitOverrunError:
            return await self._skip_line()
        except (ConnectionError, OSError):
            return None

    async def _skip_line(self) -> _Oversized | None:
        """Reads past a line longer than LINE_LIMIT a chunk at a time, keeping its head (to tell its id) and its
        size: the line is never held whole, and what follows it is read as the next line."""
        head = b""
        size = 0
        try:
            while True:
                try:
                    tail = await self._reader.readuntil(b"\n")
                except asyncio.LimitOverrunError as exc:
                    chunk = await self._reader.read(min(exc.consumed, SKIP_CHUNK))
                    head = head or chunk[:HEAD_BYTES]
                    size += len(chunk)
                    continue
                return _Oversized(head or tail[:HEAD_BYTES], size + len(tail) - 1)  # not its newline
        except asyncio.IncompleteReadError as exc:
            return _Oversized(head or exc.partial[:HEAD_BYTES], size + len(exc.partial))
        except (ConnectionError, OSError):
            return None

    async def close(self) -> None:
        if not self._writer.is_closing():
            self._writer.close()
