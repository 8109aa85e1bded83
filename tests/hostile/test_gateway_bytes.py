"""The gateway's memory against one tenant's bytes, measured on the real gateway process (its peak resident set,
VmHWM): a 240 MiB journal initialized, a flood of shell input into a shell that does not read, and a flood of big
requests to an agentctl that does not answer. Each stays far under the chart's 384Mi limit, every client frame
gets its answer or a typed refusal, and the session is usable afterwards.

The gateway runs in dev mode on the fake Kubernetes API (`tests/support/fake_api.py`). Sessions: `journal`, whose
agentctl is the stand-in (`benchmarks/agentctl_standin.py`) serving 240 entries of 1 MiB in agentctl's pages;
`shell`, a real agentctl with the demo agent and `/bin/sh`; `silent`, an agentctl address that accepts
connections and never answers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from benchmarks.agentctl_standin import Journal
from benchmarks.agentctl_standin import build_app as standin_app
from benchmarks.procfs import rss_bytes

from agentsession.contract.wire import HISTORY_PAGE_BYTES
from agentsession.gateway.upstream import SHELL_INPUT_BYTES, SHELL_QUEUE_BYTES
from tests.component.conftest import Agentctl, wait_until
from tests.component.test_gateway_fuzz import NS, session
from tests.support.fake_api import FakeApi
from tests.support.gateway import GatewayProcess, gateway_process
from tests.support.release_key import token_of

MiB = 1024 * 1024
LIFECYCLE, TASK = "agent-lifecycle.v1", "task-session.v1"
JOURNAL, SHELL, SILENT = f"{NS}/journal", f"{NS}/shell", f"{NS}/silent"
ENTRIES, ENTRY_BYTES = 240, MiB  # 240 MiB of history, in entries as big as agentctl stores them
FLOOD = 300  # frames of each flood, as in the report: 300 frames of 1 MiB took the gateway to 1.15 GB
# The chart's memory limit for the gateway is 384Mi; what each attack may add to the gateway's resident set.
LIMIT = 384 * MiB
GROWTH_BOUND = 64 * MiB
WAIT = 120.0
SLOW_READ = 0.05  # seconds a client on a slow link takes over each page


@dataclass
class Stage:
    api: FakeApi
    gateway: GatewayProcess
    http: aiohttp.ClientSession
    agentctl: Agentctl

    def rss(self, field: str = "VmRSS") -> int:
        value = rss_bytes(self.gateway.proc.pid, field)
        assert value is not None, "the gateway is gone"
        return value


@asynccontextmanager
async def silent_agentctl() -> AsyncIterator[str]:
    """An address that accepts connections and never answers: a call to it waits until its timeout."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in held:
            writer.close()
        server.close()


@pytest.fixture
async def stage(
    spawn: Callable[..., Awaitable[Agentctl]], http: aiohttp.ClientSession, tmp_path: Path
) -> AsyncIterator[Stage]:
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(FakeApi().serving())
        standin = await stack.enter_async_context(TestServer(standin_app(Journal(ENTRIES, ENTRY_BYTES))))
        silent = await stack.enter_async_context(silent_agentctl())
        running = gateway_process(
            str(api.kubeconfig(tmp_path / "kubeconfig")), tmp_path / "gateway.log", "--insecure-dev-mode"
        )
        # The gateway starts (blocking: it polls /readyz) off the loop, which serves the fake API meanwhile.
        starting = asyncio.create_task(asyncio.to_thread(running.__enter__))

        async def stop_gateway() -> None:
            await starting
            await asyncio.to_thread(running.__exit__, None, None, None)

        stack.push_async_callback(stop_gateway)
        ctl = await spawn("--shell", "/bin/sh", token=token_of(NS, "shell"))
        await ctl.ok("POST", "/api/v1/start", {})
        gateway = await starting
        for name, endpoint in (("journal", str(standin.make_url("")).rstrip("/")), ("shell", ctl.base),
                               ("silent", silent)):  # fmt: skip
            await api.put(session(name, ready=True, endpoint=endpoint))

        async def sees_all() -> bool:
            async with http.get(gateway.http_url + "/readyz") as resp:
                return bool((await resp.json())["sessions"] == 3)

        await wait_until(sees_all, "the gateway to see the sessions")
        yield Stage(api, gateway, http, ctl)


async def connect(stage: Stage, dialect: str) -> aiohttp.ClientWebSocketResponse:
    return await stage.http.ws_connect(stage.gateway.ws_url, protocols=(dialect,), max_msg_size=0)


async def frames(ws: aiohttp.ClientWebSocketResponse) -> AsyncIterator[dict[str, Any]]:
    async with asyncio.timeout(WAIT):
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                yield json.loads(msg.data)


def seq_of(update: dict[str, Any]) -> int:
    """The stand-in's entry n says n in the first eight characters of its text."""
    return int(update["notification"]["update"]["content"]["text"][:8])


async def test_a_240_mib_journal_comes_in_pages_with_the_gateway_far_under_its_limit(stage: Stage) -> None:
    """Before the pages, one initialize of such a journal (60 entries of 4 MiB then) took the gateway from
    88 MB to 1,284 MB: it read the whole history in one call and sent it as one frame."""
    before = stage.rss()
    ws = await connect(stage, LIFECYCLE)
    await ws.send_json({"type": "initialize_agent_request", "agentId": JOURNAL, "requestId": "big"})
    seen: list[int] = []
    kinds: list[str] = []
    largest = 0
    async for frame in frames(ws):
        if frame["type"] not in ("agent_initialized", "agent_history"):
            assert frame["type"] != "error", frame
            continue
        payload = frame["payload"]
        assert (payload["agentId"], payload["requestId"]) == (JOURNAL, "big")
        kinds.append(frame["type"])
        page = [seq_of(u) for u in payload["updates"]]
        largest = max(largest, len(json.dumps(payload["updates"])))
        seen += page
        # `next` says where the following page starts: after the last entry of this one; null at the end.
        if payload["next"] is None:
            break
        assert payload["next"] == page[-1]
        # A client on a slow link: the gateway reads no page ahead of it, so nothing waits for it but one page.
        await asyncio.sleep(SLOW_READ)
    peak = stage.rss("VmHWM")
    assert seen == list(range(1, ENTRIES + 1))
    assert kinds[0] == "agent_initialized"
    assert set(kinds[1:]) == {"agent_history"}
    assert len(kinds) >= ENTRIES * ENTRY_BYTES // HISTORY_PAGE_BYTES
    assert largest <= HISTORY_PAGE_BYTES + 64 * 1024
    assert peak - before < GROWTH_BOUND, (
        f"the gateway grew from {before / MiB:.0f} MiB to {peak / MiB:.0f} MiB"
    )
    assert peak < LIMIT
    print(f"\n240 MiB journal: gateway RSS {before / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB")

    # The client is live after the history, and the gateway serves it and others as before.
    await ws.send_json({"type": "ping", "requestId": "after"})
    async for frame in frames(ws):
        if frame["type"] == "pong":
            break
    await ws.close()
    await still_usable(stage)


async def test_a_shell_input_flood_is_refused_beyond_one_queue_and_let_go_when_the_client_leaves(
    stage: Stage,
) -> None:
    """Before the bounds, 300 frames of 1 MiB into a shell running `sleep 600` took the gateway from 96 MB to
    1.15 GB in 2 s, and it stayed there after the client left."""
    before = stage.rss()
    ws = await connect(stage, TASK)
    answers: list[dict[str, Any]] = []
    answered = asyncio.Condition()

    async def read() -> None:
        async for frame in frames(ws):
            if frame["type"] in ("response", "error"):
                async with answered:
                    answers.append(frame)
                    answered.notify_all()

    async def request(action: str, **payload: Any) -> str:
        rid = uuid.uuid4().hex
        await ws.send_json({"id": rid, "type": "request", "action": action, "payload": payload})
        return rid

    async def answer(rid: str) -> dict[str, Any]:
        async with answered, asyncio.timeout(WAIT):
            await answered.wait_for(lambda: any(a["id"] == rid for a in answers))
        return next(a for a in answers if a["id"] == rid)

    reader = asyncio.create_task(read())
    try:
        assert (await answer(await request("task.subscribe", task_id=SHELL)))["type"] == "response"
        assert (await answer(await request("shell.subscribe", task_id=SHELL)))["type"] == "response"
        ran = await answer(await request("shell.input", task_id=SHELL, data="sleep 600\n"))
        assert ran["type"] == "response"

        # Frames of 1 MiB are longer than one shell.input may carry.
        big = "y" * (MiB - 200)
        sent = [await request("shell.input", task_id=SHELL, data=big) for _ in range(FLOOD)]
        refused = [await answer(rid) for rid in sent]
        assert {(a["type"], a["payload"]["code"]) for a in refused} == {("error", "VALIDATION_ERROR")}

        # Frames that may be sent fill the shell's one queue while the shell does not read; the rest are refused.
        piece = "z" * (SHELL_INPUT_BYTES - 1024)
        sent = [await request("shell.input", task_id=SHELL, data=piece) for _ in range(FLOOD)]
        # A ping sent last is answered after every frame before it was taken: queued or refused.
        await answer(await request("ping"))
        flooded = {a["id"]: a for a in answers if a["id"] in set(sent)}
        codes = Counter(a["payload"]["code"] for a in flooded.values() if a["type"] == "error")
        assert set(codes) == {"TOO_MANY_REQUESTS"}, codes
        waiting = FLOOD - len(flooded)
        assert waiting * len(piece) <= SHELL_QUEUE_BYTES, f"{waiting} inputs wait in the gateway"
        refusal = next(a for a in flooded.values() if a["type"] == "error")
        assert "input queue is full" in refusal["payload"]["message"]
        peak = stage.rss("VmHWM")
    finally:
        reader.cancel()
        await ws.close()
    assert peak - before < GROWTH_BOUND, (
        f"the gateway grew from {before / MiB:.0f} MiB to {peak / MiB:.0f} MiB"
    )
    print(f"\nshell flood: gateway RSS {before / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB")
    # The client left: what it had queued is let go, and the gateway's resident set is back near where it was.
    await wait_until(_small(stage, before), "the gateway to let go of the shell input", within=WAIT)
    await still_usable(stage)


async def test_big_requests_to_an_agentctl_that_does_not_answer_are_bounded_in_bytes(stage: Stage) -> None:
    """Each request waiting for its answer holds its frame: at most 8 MiB of them per connection. Before the byte
    bound, 300 prompts of 1 MiB took the gateway from 88 MB to 610 MB (256 of them in flight), and it stayed there
    after the client left."""
    before = stage.rss()
    ws = await connect(stage, LIFECYCLE)
    text = "w" * (MiB - 200)
    for n in range(FLOOD):
        await ws.send_json(
            {"type": "send_agent_message", "agentId": SILENT, "text": text, "requestId": str(n)}
        )
    await ws.send_json({"type": "ping", "requestId": "last"})
    refused = 0
    async for frame in frames(ws):
        if frame["payload"].get("requestId") == "last":
            assert frame["type"] == "pong", frame
            break
        if frame["type"] == "error":
            assert frame["payload"]["code"] == "too_many_requests", frame
            assert "bytes" in frame["payload"]["message"]
            refused += 1
    peak = stage.rss("VmHWM")
    await ws.close()
    # A request always fits when none waits; then 8 MiB of them, each of 1 MiB.
    assert refused >= FLOOD - 8
    assert peak - before < GROWTH_BOUND, (
        f"the gateway grew from {before / MiB:.0f} MiB to {peak / MiB:.0f} MiB"
    )
    print(f"\nrequest flood: gateway RSS {before / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB")
    await still_usable(stage)


def _small(stage: Stage, before: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return stage.rss() - before < GROWTH_BOUND // 2

    return check


async def still_usable(stage: Stage) -> None:
    """A new client initializes the real agent's session, gets its history, prompts, and sees the turn end."""
    assert stage.gateway.proc.poll() is None, f"the gateway exited: {stage.gateway.output()[-3000:]}"
    ws = await connect(stage, LIFECYCLE)
    await ws.send_json({"type": "initialize_agent_request", "agentId": SHELL, "requestId": "init"})
    async for frame in frames(ws):
        if frame["type"] in ("agent_initialized", "agent_history") and frame["payload"]["next"] is None:
            break
        assert frame["type"] != "error", frame
    await ws.send_json({"type": "send_agent_message", "agentId": SHELL, "text": "still there?"})
    said = ""
    async for frame in frames(ws):
        assert frame["type"] != "error", frame
        if frame["type"] == "agent_update":
            update = frame["payload"]["notification"]["update"]
            if update.get("sessionUpdate") == "agent_message_chunk":
                said += update["content"]["text"]
        status = frame["payload"].get("status") if frame["type"] == "agent_status" else None
        if frame["payload"].get("agentId") == SHELL and status == "ready" and "still there?" in said:
            break
    await ws.close()
    lines = [json.loads(line) for line in stage.gateway.output().splitlines() if line.startswith("{")]
    errors = [line for line in lines if line["level"] in ("error", "critical")]
    assert errors == [], f"the gateway logged errors: {errors[:3]}"
