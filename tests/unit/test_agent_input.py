"""What agentctl takes from the agent's stdout (`agent_input`, `channel`): lines too long, too deep, too dear to
parse or not JSON-RPC the SDK can act on are refused with the reason, and answered where their id can be told;
the SDK's receive loop, whose end agentctl watches, is found on a real connection."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest
from acp import Client, connect_to_agent

from agentsession.agentctl.agent_input import (
    INVALID_REQUEST,
    MAX_DEPTH,
    MIB,
    PARSE_BUDGET_BYTES,
    REFUSED_ANSWER,
    Refusal,
    parse_cost,
    parse_message,
    too_deep,
)
from agentsession.agentctl.bridge.attachment import receive_loop
from agentsession.agentctl.bridge.intake import KNOWN_KINDS
from agentsession.agentctl.channel import ANSWERS_BUFFER_MAX, AgentChannel
from agentsession.agentctl.session_store import SessionRecord, SessionStore
from agentsession.agentctl.transport import LINE_LIMIT, AgentPipes


def line(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def nested(levels: int, bottom: Any = 0) -> Any:
    value = bottom
    for _ in range(levels):
        value = [value]
    return value


def update(content: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": content}}


def test_a_well_formed_message_is_taken_as_it_came() -> None:
    message = update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}})
    assert parse_message(line(message)) == message
    answer = {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}
    assert parse_message(line(answer)) == answer
    assert parse_message(line({"jsonrpc": "2.0", "id": "x", "error": {"code": 1, "message": "m"}}))


def test_nesting_past_the_parsers_recursion_is_bad_input_not_a_crash() -> None:
    refusal = parse_message(b"[" * 100_000)
    assert isinstance(refusal, Refusal)
    assert refusal.reason == f"it nests deeper than {MAX_DEPTH} levels"
    assert not refusal.answerable


def test_nesting_the_parser_takes_is_refused_past_the_bound() -> None:
    ok = update({"sessionUpdate": "x", "deep": nested(MAX_DEPTH - 4)})
    assert parse_message(line(ok)) == ok
    deep = parse_message(line(update({"sessionUpdate": "x", "deep": nested(900)})))
    assert isinstance(deep, Refusal)
    assert "nests deeper" in deep.reason
    assert not too_deep({"a": [[[]]]}, 4)
    assert too_deep({"a": [[[]]]}, 3)
    assert too_deep(nested(100_000), MAX_DEPTH)  # iterative: any depth is safe to check


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"not json at all", "not JSON: 'not json at all'"),
        (b"[1, 2]", "not an object"),
        (line({"id": 1, "result": {}}), 'no "jsonrpc": "2.0"'),
        (
            line({"jsonrpc": "2.0", "id": [1], "result": {}}),
            "its id is neither a string, an integer nor null",
        ),
        (line({"jsonrpc": "2.0", "id": True, "method": "m"}), "its id is neither"),
        (line({"jsonrpc": "2.0", "method": 42}), "its method is not a string"),
        (line({"jsonrpc": "2.0", "params": {}}), "neither a request nor a response"),
        (line({"jsonrpc": "2.0", "id": 1, "error": "no"}), "its error is not an object"),
        (line({"jsonrpc": "2.0", "id": 1}), "a response with neither result nor error"),
    ],
)
def test_what_is_not_json_rpc_is_refused_with_its_reason(raw: bytes, problem: str) -> None:
    refusal = parse_message(raw)
    assert isinstance(refusal, Refusal)
    assert problem in refusal.reason


def test_a_refused_line_keeps_its_id_where_it_can_be_told() -> None:
    answer = b'{"jsonrpc":"2.0","id":7,"result":' + b"[" * 100_000
    refusal = parse_message(answer)
    assert isinstance(refusal, Refusal)
    assert (refusal.id, refusal.request) == (7, False)
    request = b'{"jsonrpc":"2.0","id":"agent-1","method":"session/request_permission","params":' + b"[" * 5000
    refusal = parse_message(request)
    assert isinstance(refusal, Refusal)
    assert (refusal.id, refusal.request) == ("agent-1", True)
    parsed = parse_message(line({"jsonrpc": "2.0", "id": 9, "error": "no"}))
    assert isinstance(parsed, Refusal)
    assert (parsed.id, parsed.request) == (9, False)
    # An id further in is not the envelope's (it may be a tool call's): no id.
    inner = b'{"jsonrpc":"2.0","method":"session/update","params":{"id":5,"x":' + b"[" * 5000
    refusal = parse_message(inner)
    assert isinstance(refusal, Refusal)
    assert not refusal.answerable


def test_a_line_dear_to_parse_is_refused_unparsed_and_real_text_is_not() -> None:
    costly = line({"jsonrpc": "2.0", "method": "session/update", "params": {"many": [{}] * (4 * MIB // 3)}})
    assert parse_cost(costly) > PARSE_BUDGET_BYTES
    refusal = parse_message(costly)
    assert isinstance(refusal, Refusal)
    assert "MiB to parse" in refusal.reason
    # A file the agent wrote, as real messages carry one: source code, and a lock file of JSON, near the line limit.
    source = "def f(a, b):\n    return {a: [b, a]}\n" * (LINE_LIMIT // 48)
    lock = json.dumps(
        {f"pkg-{i}": {"version": "1.0.0", "integrity": "sha512-" + "x" * 88} for i in range(40_000)}
    )
    for text in (source, lock):
        message = update({"sessionUpdate": "tool_call", "content": [{"type": "text", "text": text}]})
        raw = line(message)
        assert len(raw) < LINE_LIMIT
        assert parse_cost(raw) < PARSE_BUDGET_BYTES
        assert parse_message(raw) == message
    assert parse_cost(b"{}" * 1000) == 0  # short lines are not counted at all


def test_every_kind_the_schema_knows_is_a_metric_label() -> None:
    assert {
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "current_mode_update",
    } <= KNOWN_KINDS
    assert len(KNOWN_KINDS) < 30


class WriteTransport:
    def __init__(self) -> None:
        self.buffered = 0

    def get_write_buffer_size(self) -> int:
        return self.buffered


class Writer:
    """The agent's stdin, as a list of the messages written to it."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.transport = WriteTransport()

    def write(self, data: bytes) -> None:
        self.lines.extend(json.loads(part) for part in data.splitlines())

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        return None


class Channel:
    """An AgentChannel over a reader the test feeds, with a small line limit."""

    def __init__(self, limit: int = 1024) -> None:
        self.reader = asyncio.StreamReader(limit=limit)
        self.writer = Writer()
        self.refused: list[Refusal] = []
        self.journaled: list[dict[str, Any]] = []
        pipes = AgentPipes(self.reader, cast(asyncio.StreamWriter, self.writer))
        self.channel = AgentChannel(pipes, self._on_message, self.refused.append, lambda: None)

    def _on_message(self, message: dict[str, Any]) -> bool:
        if message.get("method") == "session/update":
            self.journaled.append(message)
            return True
        return False

    def feed(self, *lines: bytes) -> None:
        for raw in lines:
            self.reader.feed_data(raw + b"\n")

    async def receive(self) -> dict[str, Any] | None:
        return await asyncio.wait_for(self.channel.receive(), 5)


async def test_an_oversized_line_is_skipped_and_what_follows_it_read() -> None:
    ch = Channel(limit=1024)
    after = {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}
    ch.feed(b'{"jsonrpc":"2.0","method":"session/update","params":"' + b"x" * 10_000 + b'"}', line(after))
    assert await ch.receive() == after
    assert len(ch.refused) == 1
    assert "it is 10055 bytes long" in ch.refused[0].reason
    assert ch.journaled == []  # the tail of the long line is not read as a line of its own


async def test_a_refused_answer_becomes_an_error_answer_to_its_call() -> None:
    ch = Channel(limit=1024)
    ch.feed(b'{"jsonrpc":"2.0","id":4,"result":"' + b"y" * 5000 + b'"}')
    answer = await ch.receive()
    assert answer is not None
    assert answer["id"] == 4
    assert answer["error"]["code"] == REFUSED_ANSWER
    assert "bytes long, over the limit" in answer["error"]["message"]


async def test_a_refused_request_is_answered_to_the_agent() -> None:
    ch = Channel()
    later = update({"sessionUpdate": "agent_message_chunk"})
    ch.feed(line({"jsonrpc": "2.0", "id": "a-1", "method": "x", "params": nested(100)}), line(later))
    ch.reader.feed_eof()
    assert await ch.receive() is None
    assert ch.journaled == [later]
    assert len(ch.writer.lines) == 1
    sent = ch.writer.lines[0]
    assert (sent["id"], sent["error"]["code"]) == ("a-1", INVALID_REQUEST)
    assert (
        sent["error"]["message"] == f"agentctl refused the request: it nests deeper than {MAX_DEPTH} levels"
    )


async def test_an_agent_that_does_not_read_its_input_gets_no_more_answers_and_is_still_read() -> None:
    ch = Channel()
    ch.writer.transport.buffered = ANSWERS_BUFFER_MAX
    answer = {"jsonrpc": "2.0", "id": 2, "result": {}}
    ch.feed(line({"jsonrpc": "2.0", "id": "a-1", "method": 7}), line(answer))
    assert await ch.receive() == answer
    assert ch.writer.lines == []
    assert len(ch.refused) == 1


async def test_the_sdks_receive_loop_is_found_and_ends_with_its_connection() -> None:
    ch = Channel()
    conn = connect_to_agent(cast(Client, object()), ch.channel)
    loop = receive_loop(conn)
    assert loop is not None, "acp no longer keeps its receive task where agentctl looks (see receive_loop)"
    assert not loop.done()
    await conn.close()
    assert loop.done()


def test_a_session_record_nested_past_the_parser_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("[" * 100_000)
    assert SessionStore(path).record == SessionRecord()
