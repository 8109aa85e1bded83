"""A gateway for tests: the real `agentsession-gateway` entry point as a process, and a WebSocket client that
keeps every frame it received so tests can wait for one."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.processes import BIN, free_port, stop, wait_http
from tests.support.release_key import key_file

WAIT = 30.0


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    metrics_port: int

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        """`/metrics`, on the port of its own that clients need not reach."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def gateway_process(kubeconfig: str, log: Path, *args: str) -> Iterator[GatewayProcess]:
    port, metrics_port = free_port(), free_port()
    command = [str(BIN / "agentsession-gateway"), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port)]
    command += [
        "--kubeconfig",
        kubeconfig,
        "--log-format",
        "json",
        "--agentctl-key-file",
        str(key_file()),
        *args,
    ]
    with log.open("ab") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", 30, proc, log)
        yield GatewayProcess(proc, port, log, metrics_port)
    finally:
        stop(proc)


class Client:
    """A gateway client on aiohttp that keeps every frame it received, so tests can wait for one."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self._seen = 0
        self._new = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())
        self.closed_code: int | None = None

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                async with self._new:
                    self.frames.append(json.loads(msg.data))
                    self._new.notify_all()
        async with self._new:
            self.closed_code = self.ws.close_code
            self._new.notify_all()

    async def send(self, frame: dict[str, Any] | str) -> None:
        await self.ws.send_str(frame if isinstance(frame, str) else json.dumps(frame))

    async def wait_for(
        self, what: str, match: Callable[[dict[str, Any]], bool], within: float = WAIT, *, since: int = 0
    ) -> dict[str, Any]:
        """The first frame from index `since` on that matches."""
        deadline = time.monotonic() + within

        def found() -> dict[str, Any] | None:
            return next((f for f in self.frames[since:] if match(f)), None)

        async with self._new:
            while (hit := found()) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.closed_code is not None and self._reader.done()):
                    raise AssertionError(
                        f"no frame for {what} within {within}s; got {[f.get('type') or f.get('action') for f in self.frames]}"
                        f"{self.frames[-3:]}"
                    )
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._new.wait(), remaining)
            return hit

    async def request(self, frame: dict[str, Any], match: Callable[[dict[str, Any]], bool], what: str,
                      within: float = WAIT) -> dict[str, Any]:  # fmt: skip
        mark = len(self.frames)
        await self.send(frame)
        return await self.wait_for(what, match, within, since=mark)

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


def of_type(kind: str, **payload: Any) -> Callable[[dict[str, Any]], bool]:
    """Matches a lifecycle-dialect frame of `kind` whose payload has these values."""
    return lambda f: f.get("type") == kind and all(f["payload"].get(k) == v for k, v in payload.items())


def user_prompts(updates: list[dict[str, Any]]) -> list[str]:
    """The user's messages in a history, in order."""
    prompts = []
    for entry in updates:
        update = entry["notification"].get("update") or {}
        if update.get("sessionUpdate") == "user_message_chunk":
            prompts.append(update["content"]["text"])
    return prompts


async def initialize(ui: Client, agent_id: str, request_id: str, within: float = 120) -> dict[str, Any]:
    """`agent_initialized`'s payload: the agent's info and its whole history, from every page."""
    mark = len(ui.frames)
    answer = await ui.request(
        {"type": "initialize_agent_request", "agentId": agent_id, "requestId": request_id},
        of_type("agent_initialized", requestId=request_id),
        f"agent_initialized {request_id}",
        within=within,
    )
    payload = dict(answer["payload"])
    payload["updates"] = await history_pages(ui, payload, since=mark, within=within)
    payload["next"] = None
    return payload


async def history_pages(
    ui: Client, answer: dict[str, Any], *, since: int = 0, within: float = WAIT
) -> list[dict[str, Any]]:
    """The history of an `agent_initialized` answer: its page, then the `agent_history` pages of its request until
    one says `next: null`."""
    updates = list(answer["updates"])
    more = answer["next"]
    page_of = of_type("agent_history", requestId=answer["requestId"], agentId=answer["agentId"])
    while more is not None:
        page = await ui.wait_for(f"the history after {more}", page_of, within, since=since)
        since = ui.frames.index(page, since) + 1
        updates += page["payload"]["updates"]
        more = page["payload"]["next"]
    return updates


async def prompt_and_wait(ui: Client, agent_id: str, text: str) -> None:
    mark = len(ui.frames)
    await ui.send({"type": "send_agent_message", "agentId": agent_id, "text": text})
    await ui.wait_for(
        "processing", of_type("agent_status", agentId=agent_id, status="processing"), since=mark
    )
    await ui.wait_for(
        "ready after the turn", of_type("agent_status", agentId=agent_id, status="ready"), since=mark
    )
