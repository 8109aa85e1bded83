"""Hostile tenant, agentctl's bytes: what a hostile agent sends (a 240 MiB flood, one 4 MiB update, lines forged
into the journal, JSON nested too deeply) and what a hostile agentctl image answers (600 MiB), against real
agentctl processes and the shared client; and the bounds that hold.

- agentctl's peak memory (VmHWM of its process) stays far under its container's limit with a subscriber that does
  not read, three replays of everything and a history read page by page; the slow subscriber is closed with the
  seq to resume after.
- Every entry is served, in pages of at most HISTORY_PAGE_BYTES, each at most ENTRY_MAX_BYTES (a larger one cut,
  with its marker); forged and broken lines hide no entry, are reported once, and do not fool a restart.
- The client of a hostile agentctl holds at most the cap of its call and fails with `too_large`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from benchmarks.procfs import rss_bytes
from prometheus_client.parser import text_string_to_metric_families

from agentsession.agentctl.transport import LINE_LIMIT
from agentsession.agentctl_client import AgentctlClient
from agentsession.contract.wire import ENTRY_MAX_BYTES, HISTORY_PAGE_BYTES, HISTORY_PAGE_ENTRIES, JournalEntry
from agentsession.controller.config import OperatorConfig
from tests.component.conftest import Agentctl, frames_until, message_text, update_kind

MiB = 1024 * 1024
AGENTCTL_LIMIT = 256 * MiB  # agentctl's container limit (the operator's default `agentctl_resources`)
PEAK_BOUND = AGENTCTL_LIMIT // 2  # "far under": measured about 75 MiB in each case, 60 MiB of it at rest
CLIENT_PEAK_BOUND = 128 * MiB  # the client's process: measured about 50 MiB
FLOOD_AGENT = Path(__file__).parents[1] / "support" / "flood_agent.py"
FLOOD_COUNT, FLOOD_SIZE = 960, 256 * 1024  # 240 MiB of agent_message_chunk text
HOSTILE_ANSWER = 600 * MiB
LONG = 300.0  # a flood through agentctl, on a busy machine
WAIT = 30.0

Spawn = Callable[..., Awaitable[Agentctl]]


def peak(ctl: Agentctl, after: str = "") -> int:
    """agentctl's peak resident memory so far; printed (`pytest -s`) when `after` says what it followed."""
    value = rss_bytes(ctl.proc.pid, "VmHWM")
    assert value is not None, "agentctl is gone"
    if after:
        print(f"agentctl peak after {after}: {value / MiB:.0f} MiB")
    return value


@pytest.fixture
async def flooder(spawn: Spawn) -> Agentctl:
    """agentctl with an agent that floods on `flood COUNT SIZE`, started."""
    ctl = await spawn("--agent-command", f"{sys.executable} {FLOOD_AGENT}")
    await ctl.ok("POST", "/api/v1/start", {})
    return ctl


async def flood(ctl: Agentctl, count: int = FLOOD_COUNT, size: int = FLOOD_SIZE) -> int:
    """Runs a turn of `count` updates of `size` characters; the journal's last seq after it."""
    status, answer = await ctl.post(
        "/api/v1/acp/prompt",
        {"prompt": f"flood {count} {size}"},
        timeout=aiohttp.ClientTimeout(total=LONG),
    )
    assert (status, answer) == (200, {"stopReason": "end_turn"})
    last: int = (await ctl.status())["last_seq"]
    return last


def skipped_lines(metrics_text: str) -> dict[str, float]:
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == "agentctl_journal_lines_skipped_total"
    }


class StalledSubscriber:
    """An update-stream client that stops reading after the handshake: a bare socket whose reader takes at most
    its small buffer, until `frames` reads on."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def connect(cls, ctl: Agentctl, path: str) -> StalledSubscriber:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", ctl.port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: {ctl.signed('GET', path)['Authorization']}\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    async def frames(self) -> AsyncIterator[tuple[int, bytes]]:
        """(opcode, payload) of each frame, up to and with the close frame."""
        while True:
            first, second = await self._reader.readexactly(2)
            length = second & 0x7F
            if length >= 126:
                length = int.from_bytes(await self._reader.readexactly(2 if length == 126 else 8), "big")
            opcode, payload = first & 0x0F, await self._reader.readexactly(length)
            yield opcode, payload
            if opcode == WS_CLOSE:
                return

    def close(self) -> None:
        self._writer.close()


WS_TEXT, WS_CLOSE = 0x1, 0x8


def test_the_bound_is_under_agentctl_s_own_limit() -> None:
    limits = OperatorConfig.model_fields["agentctl_resources"].default.limits
    assert limits["memory"] == f"{AGENTCTL_LIMIT // MiB}Mi"


async def test_a_subscriber_that_stops_reading_is_closed_and_agentctl_stays_small(flooder: Agentctl) -> None:
    """Before: one subscriber that did not read took agentctl to 300 MiB (its queue held 10,000 entries)."""
    stalled = await StalledSubscriber.connect(flooder, "/api/v1/acp/stream")
    try:
        last = await flood(flooder)
        assert peak(flooder, "a 240 MiB flood with a subscriber that does not read") < PEAK_BOUND
        # Read now: what was on its way comes, then a close that says where to resume.
        seqs: list[int] = []
        async with asyncio.timeout(WAIT):
            async for opcode, payload in stalled.frames():
                if opcode == WS_TEXT:
                    seqs.append(json.loads(payload)["seq"])
    finally:
        stalled.close()
    assert opcode == WS_CLOSE
    code, reason = int.from_bytes(payload[:2], "big"), payload[2:].decode()
    assert code == 1013  # try again later
    assert "bytes behind" in reason
    resume = int(reason.rsplit("?after=", 1)[1])
    assert resume == (seqs[-1] if seqs else 0)
    assert resume < last - 10  # it was dropped mid-flood, not after it had everything

    resumed = await flooder.ws(f"/api/v1/acp/stream?after={resume}")
    async with asyncio.timeout(WAIT):
        assert json.loads(await resumed.recv())["seq"] == resume + 1


async def test_replays_and_history_pages_hold_a_batch_not_the_journal(
    flooder: Agentctl, http: aiohttp.ClientSession
) -> None:
    """Before: three `?after=0` replays took agentctl to 787 MiB, one GET /api/v1/history to 1019 MiB (both read
    the whole range into a list, then encoded it whole)."""
    last = await flood(flooder)
    peak(flooder, "a 240 MiB flood")
    everything = list(range(1, last + 1))

    async def replay() -> list[int]:
        ws = await flooder.ws("/api/v1/acp/stream?after=0")
        seqs: list[int] = []
        async with asyncio.timeout(LONG):
            while len(seqs) < last:
                seqs.append(json.loads(await ws.recv())["seq"])
        return seqs

    assert await asyncio.gather(replay(), replay(), replay()) == [everything] * 3
    assert peak(flooder, "three replays of it at once") < PEAK_BOUND

    # The history comes in pages that follow `next`, through the shared client (which caps each answer).
    client = AgentctlClient(http, flooder.base, flooder.token)
    seqs: list[int] = []
    pages, after = 0, 0
    while True:
        page = await client.history(after)
        pages += 1
        assert page.last_seq == last
        assert 0 < len(page.updates) <= HISTORY_PAGE_BYTES // FLOOD_SIZE
        seqs += [entry.seq for entry in page.updates]
        if page.next is None:
            break
        assert page.next == page.updates[-1].seq
        after = page.next
    assert seqs == everything
    assert pages > FLOOD_COUNT * FLOOD_SIZE // HISTORY_PAGE_BYTES
    assert peak(flooder, f"its history in {pages} pages") < PEAK_BOUND


async def test_a_page_holds_at_most_1000_entries_whatever_limit_is_asked(flooder: Agentctl) -> None:
    """Before: a page held up to 100,000 entries, and what lay past it was not said to exist."""
    last = await flood(flooder, 1500, 10)
    page = await flooder.ok("GET", "/api/v1/history?after=0&limit=100000")
    assert [e["seq"] for e in page["updates"]] == list(range(1, HISTORY_PAGE_ENTRIES + 1))
    assert (page["next"], page["last_seq"]) == (HISTORY_PAGE_ENTRIES, last)
    rest = await flooder.ok("GET", f"/api/v1/history?after={page['next']}")
    assert [e["seq"] for e in rest["updates"]] == list(range(HISTORY_PAGE_ENTRIES + 1, last + 1))
    assert rest["next"] is None


async def test_a_4_mib_update_is_stored_and_served_cut_to_1_mib_with_its_marker(
    flooder: Agentctl, http: aiohttp.ClientSession
) -> None:
    stream = await flooder.ws("/api/v1/acp/stream")
    await flood(flooder, 1, 4 * MiB)
    frames = await frames_until(stream, lambda frame: frame["kind"] == "turn_end")
    (chunk,) = [frame for frame in frames if update_kind(frame) == "agent_message_chunk"]
    assert len(json.dumps(chunk, separators=(",", ":"))) <= ENTRY_MAX_BYTES
    assert chunk["truncated"]["bytes"] > 4 * MiB
    assert chunk["notification"]["update"]["sessionUpdate"] == "agent_message_chunk"

    # Stored cut too: no line of the file is longer than an entry.
    journal = flooder.workdir / ".agentctl" / "history.jsonl"
    with journal.open("rb") as f:
        assert max(len(line) for line in f) <= ENTRY_MAX_BYTES + 1

    # The shared client reads it from both the history and the stream (within their caps).
    client = AgentctlClient(http, flooder.base, flooder.token)
    (served,) = [e for e in (await client.history()).updates if e.seq == chunk["seq"]]
    assert served.truncated is not None
    assert served.truncated.bytes == chunk["truncated"]["bytes"]
    async with client.updates(chunk["seq"] - 1) as entries:
        async with asyncio.timeout(WAIT):
            assert JournalEntry.model_validate(chunk) == await anext(entries)


async def test_an_update_at_the_line_limit_peaks_under_the_bound_and_a_longer_one_is_refused(
    flooder: Agentctl,
) -> None:
    """Before: agentctl read lines of up to 50 MiB from the agent, and one of 48 MiB took it to 251 MiB."""
    await flood(flooder, 1, LINE_LIMIT - 4096)
    assert peak(flooder, "an update at the line limit") < PEAK_BOUND
    cut = [e for e in await flooder.history() if update_kind(e) == "agent_message_chunk"]
    assert [e["truncated"]["bytes"] > LINE_LIMIT - 4096 for e in cut] == [True]

    await flood(flooder, 1, LINE_LIMIT + MiB)
    assert peak(flooder) < PEAK_BOUND
    errors = [e["notification"]["message"] for e in await flooder.history() if e["kind"] == "agent_error"]
    assert any(f"over the limit of {LINE_LIMIT // MiB} MiB" in message for message in errors), errors
    assert [e for e in await flooder.history() if update_kind(e) == "agent_message_chunk"] == cut
    status, answer = await flooder.post("/api/v1/acp/prompt", {"prompt": "flood 1 10"})
    assert (status, answer) == (200, {"stopReason": "end_turn"})  # the session goes on


def _forged_line(seq: int, text: str) -> bytes:
    update = {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}
    entry = {
        "seq": seq,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "kind": "session_update",
        "notification": {"sessionId": "forged", "update": update},
    }
    return json.dumps(entry).encode() + b"\n"


def _user_texts(entries: list[dict[str, Any]]) -> list[str]:
    return [
        e["notification"]["update"]["content"]["text"]
        for e in entries
        if update_kind(e) == "user_message_chunk"
    ]


async def test_broken_and_forged_journal_lines_hide_nothing_and_do_not_fool_a_restart(
    spawn: Spawn, workdir: Path
) -> None:
    """Before: a non-JSON line made GET /api/v1/history answer 500 and closed the update stream; a line with a
    huge seq hid every entry after it, and a restarted agentctl appended after that seq."""
    ctl = await spawn()
    await ctl.ok("POST", "/api/v1/start", {})
    await ctl.ok("POST", "/api/v1/acp/prompt", {"prompt": "first"})
    journal = workdir / ".agentctl" / "history.jsonl"
    with journal.open("ab") as f:  # as the agent, which can write to the workspace, could
        f.write(b"this line is not JSON\n")
        f.write(_forged_line(10**15, "a seq far ahead"))
        f.write(b'{"seq": 1, "timest')  # and no newline: the next entry must not become part of this line
    stream = await ctl.ws("/api/v1/acp/stream?after=0")
    await ctl.ok("POST", "/api/v1/acp/prompt", {"prompt": "second"})

    history = await ctl.history()
    seqs = [e["seq"] for e in history]
    assert seqs == list(range(1, len(seqs) + 1))
    assert _user_texts(history) == ["first", "second"]
    assert "said: second" in message_text(history)
    replayed = await frames_until(stream, lambda f: f["kind"] == "turn_end" and f["seq"] == seqs[-1])
    assert replayed == history
    await stream.send('{"type": "ping"}')  # the stream is still open
    assert (await frames_until(stream, lambda f: True))[0] == {"type": "pong"}

    # Each skipped line is reported once however often it is read: a warning and a count.
    for _ in range(3):
        await ctl.history()
    status, metrics = await ctl.get("/metrics")
    assert status == 200
    assert skipped_lines(metrics) == {"unparsable": 2, "out_of_order": 1}
    warnings = [json.loads(line) for line in ctl.log().splitlines() if "journal: skipping" in line]
    assert sorted(w["reason"] for w in warnings) == ["out_of_order", "unparsable", "unparsable"]

    # A restarted agentctl reads the file the same way: its appends follow the last real entry.
    last = (await ctl.status())["last_seq"]
    await ctl.stop()
    again = await spawn()
    assert (await again.status())["last_seq"] == last
    await again.ok("POST", "/api/v1/start", {})
    await again.ok("POST", "/api/v1/acp/prompt", {"prompt": "third"})
    after = await again.history(last)
    assert after[0]["seq"] == last + 1
    assert _user_texts(await again.history()) == ["first", "second", "third"]
    status, metrics = await again.get("/metrics")
    assert skipped_lines(metrics) == {"unparsable": 2, "out_of_order": 1}  # reported again once, at its start


NESTED = "[" * 100_000


async def test_json_nested_too_deeply_is_bad_input_and_agentctl_goes_on(agentctl: Agentctl) -> None:
    """Before: a prompt whose `_meta` nested 500 levels got a 500 and a traceback in agentctl's log."""
    await agentctl.ok("POST", "/api/v1/start", {})
    deep = '{"prompt": [{"type": "text", "text": "hi", "_meta": {"a": ' + "[" * 500 + "]" * 500 + "}}]}"
    for path, body in [
        ("/api/v1/start", NESTED),
        ("/api/v1/acp/prompt", NESTED),
        ("/api/v1/acp/prompt", deep),
        ("/api/v1/acp/permissions/respond", NESTED),
    ]:
        status, answer = await agentctl.request("POST", path, data=body)
        assert (status, answer["error"]) == (400, "invalid_json"), (path, answer)
        assert "nested too deeply" in answer["message"]
    for path in ("/api/v1/acp/stream", "/api/v1/shell/stream"):
        ws = await agentctl.ws(path)
        await ws.send(NESTED)
        error = (await frames_until(ws, lambda f: f.get("type") == "error"))[-1]
        assert error["error"] == "invalid_json"
        await ws.send('{"type": "ping"}')
        assert (await frames_until(ws, lambda f: f.get("type") == "pong"))[-1] == {"type": "pong"}
    status, answer = await agentctl.post("/api/v1/acp/prompt", {"prompt": "still here"})
    assert (status, answer) == (200, {"stopReason": "end_turn"})
    assert "Traceback" not in agentctl.log()


# --- a hostile agentctl: answers of 600 MiB ---


def _accept(key: str) -> str:
    digest = hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    return base64.b64encode(digest).decode()


async def _serve_hostile(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request with 600 MiB, streamed from one 1 MiB piece: a JSON body (chunked, or announced by
    its Content-Length) or, on the update stream, one WebSocket frame."""
    try:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split(" ", 2)[1].split("?")[0]
        headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
        if path == "/api/v1/acp/stream":
            key = headers["Sec-WebSocket-Key"]
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + f"Sec-WebSocket-Accept: {_accept(key)}\r\n\r\n".encode()
            )
            writer.write(b"\x81\x7f" + HOSTILE_ANSWER.to_bytes(8, "big"))  # a text frame of 600 MiB
        elif path == "/api/v1/history":
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {HOSTILE_ANSWER}\r\n\r\n".encode())
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        piece = b'{"x":"' + b"x" * (MiB - 6)
        for _ in range(HOSTILE_ANSWER // MiB):
            writer.write(piece)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the client stopped reading, as it should
    finally:
        writer.close()


CLIENT = """
import asyncio, json, sys
import aiohttp
from agentsession.agentctl_client import AgentctlClient, AgentctlError

async def main(url):
    codes = {}
    async with aiohttp.ClientSession() as http:
        client = AgentctlClient(http, url, "token", timeout=120)
        for name in ("status", "history", "permissions", "shell_status"):
            try:
                await getattr(client, name)()
                codes[name] = "answered"
            except AgentctlError as error:
                codes[name] = error.code
        try:
            async with client.updates(0) as entries:
                async for _ in entries:
                    pass
            codes["updates"] = "ended"
        except AgentctlError as error:
            codes["updates"] = error.code
    status = open("/proc/self/status").read()
    peak = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:"))
    print(json.dumps({"codes": codes, "peak": peak}))

asyncio.run(main(sys.argv[1]))
"""


@pytest.fixture
async def hostile_agentctl() -> AsyncIterator[str]:
    server = await asyncio.start_server(_serve_hostile, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_client_of_a_hostile_agentctl_holds_no_more_than_the_cap_of_its_call(
    hostile_agentctl: str,
) -> None:
    """Before: a 600 MiB answer to /api/v1/status took the client's process to 3.6 GB."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLIENT,
        hostile_agentctl,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ.copy(),
    )
    async with asyncio.timeout(LONG):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-2000:]
    result = json.loads(out)
    print(f"the client's peak against 600 MiB answers: {result['peak'] / MiB:.0f} MiB")
    assert result["codes"] == dict.fromkeys(
        ("status", "history", "permissions", "shell_status", "updates"), "too_large"
    )
    assert result["peak"] < CLIENT_PEAK_BOUND
