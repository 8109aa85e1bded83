"""Talking to one agent's agentctl: its HTTP calls, and the update and shell streams this replica keeps open.

One update stream per agent per replica, whatever the number of clients: entries are fanned out by the
registry. The stream resumes with `?after=<last seq>` so a dropped connection or a restarted agentctl loses
nothing and repeats nothing; if agentctl serves another journal than the one followed (a fresh workspace,
told by its `journal_id`), its seqs are all new and the stream starts over from the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from agentsession.agentctl_api import HISTORY_PATH, PROMPT_PATH, STATUS_PATH, STREAM_PATH
from agentsession.gateway import metrics
from agentsession.gateway.events import ErrorCode, RequestError

log = logging.getLogger(__name__)

Manifest = dict[str, Any]

MODE_PATH = "/api/v1/acp/mode"
CANCEL_PATH = "/api/v1/acp/cancel"
PERMISSIONS_PATH = "/api/v1/acp/permissions"
PERMISSIONS_RESPOND_PATH = "/api/v1/acp/permissions/respond"
SHELL_STATUS_PATH = "/api/v1/shell/status"
SHELL_BUFFER_PATH = "/api/v1/shell/buffer"
SHELL_STREAM_PATH = "/api/v1/shell/stream"


class AgentctlClient:
    def __init__(self, http: aiohttp.ClientSession, endpoint: str, token: str, timeout: float = 30.0) -> None:
        self.http = http
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def ws_url(self, path: str) -> str:
        return "ws" + self.endpoint.removeprefix("http") + path

    async def call(self, method: str, path: str, body: Any = None) -> Manifest:
        try:
            async with self.http.request(
                method, self.endpoint + path, json=body, headers=self.headers, timeout=self._timeout
            ) as resp:
                text = await resp.text()
                data = json.loads(text) if text else {}
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise RequestError(
                ErrorCode.UPSTREAM_ERROR, f"agentctl at {self.endpoint} is not reachable: {exc}"
            ) from exc
        if resp.status >= 400:
            code = {404: ErrorCode.NOT_FOUND, 409: ErrorCode.CONFLICT, 422: ErrorCode.VALIDATION_ERROR}.get(
                resp.status, ErrorCode.UPSTREAM_ERROR
            )
            message = data.get("message", text) if isinstance(data, dict) else text
            raise RequestError(code, f"agentctl: {message}", upstream_status=resp.status)
        result: Manifest = data
        return result

    async def status(self) -> Manifest:
        return await self.call("GET", STATUS_PATH)

    async def history(self, after: int = 0) -> Manifest:
        return await self.call("GET", f"{HISTORY_PATH}?after={after}")

    async def prompt(self, text: str) -> Manifest:
        return await self.call("POST", f"{PROMPT_PATH}?wait=false", {"prompt": text})

    async def set_mode(self, mode_id: str) -> Manifest:
        return await self.call("POST", MODE_PATH, {"mode_id": mode_id})

    async def cancel(self) -> Manifest:
        return await self.call("POST", CANCEL_PATH, {})

    async def permissions(self) -> list[Manifest]:
        pending: list[Manifest] = (await self.call("GET", PERMISSIONS_PATH)).get("pending", [])
        return pending

    async def respond_permission(self, pending_id: str, option_id: str | None, cancelled: bool) -> Manifest:
        body: Manifest = {"pending_id": pending_id}
        if cancelled:
            body["cancelled"] = True
        else:
            body["option_id"] = option_id
        return await self.call("POST", PERMISSIONS_RESPOND_PATH, body)

    async def shell_status(self) -> Manifest:
        return await self.call("GET", SHELL_STATUS_PATH)

    async def shell_buffer(self) -> Manifest:
        return await self.call("GET", SHELL_BUFFER_PATH)


def _backoff(failures: int, cap: float = 5.0) -> float:
    return float(min(cap, 0.1 * 2.0 ** min(failures, 8))) * random.uniform(0.5, 1.0)


@dataclass
class JournalPosition:
    """How far one agent's journal has been delivered; it outlives the streams that advance it."""

    seq: int | None = None  # None until first contact
    journal_id: str | None = None


class UpdateStream:
    """Follows agentctl's journal over `WS /api/v1/acp/stream`, delivering each seq exactly once."""

    def __init__(
        self,
        client: AgentctlClient,
        position: JournalPosition,
        on_entry: Callable[[Manifest], None],
        on_status: Callable[[Manifest], None],
        on_connected: Callable[[bool], None],
    ) -> None:
        self.client = client
        self.position = position
        self._on_entry = on_entry
        self._on_status = on_status
        self._on_connected = on_connected
        self._task: asyncio.Task[None] | None = None
        self.connected = False
        self.reconnects = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"upstream-{self.client.endpoint}")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._follow()
                failures = 0
            except asyncio.CancelledError:
                self._set_connected(False)
                raise
            except Exception as exc:
                failures += 1
                log.info("agentctl update stream at %s dropped: %s", self.client.endpoint, exc)
            self._set_connected(False)
            self.reconnects += 1
            metrics.UPSTREAM_RECONNECTS.labels("updates").inc()
            await asyncio.sleep(_backoff(failures))

    async def _follow(self) -> None:
        status = await self.client.status()
        journal_end = int(status.get("last_seq") or 0)
        journal_id = status.get("journal_id")
        at = self.position
        if at.seq is None:
            # First contact starts at the journal's end: clients get the history on initialize.
            at.seq = journal_end
        elif journal_end < at.seq or (at.journal_id is not None and journal_id != at.journal_id):
            at.seq = 0
        at.journal_id = journal_id if isinstance(journal_id, str) else None
        self._on_status(status)
        async with self.client.http.ws_connect(
            self.client.ws_url(f"{STREAM_PATH}?after={at.seq}"),
            headers=self.client.headers,
            heartbeat=15.0,
            max_msg_size=16 * 1024 * 1024,
        ) as ws:
            self._set_connected(True)
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                frame = json.loads(msg.data)
                seq = frame.get("seq")
                if not isinstance(seq, int) or seq <= at.seq:
                    continue
                at.seq = seq
                self._on_entry(frame)

    def _set_connected(self, value: bool) -> None:
        if value != self.connected:
            self.connected = value
            metrics.UPSTREAM_STREAMS.labels("updates").inc() if value else metrics.UPSTREAM_STREAMS.labels(
                "updates"
            ).dec()
            self._on_connected(value)


class ShellStream:
    """One shell stream per agent while any client watches the shell; output is fanned out by the caller."""

    def __init__(
        self, client: AgentctlClient, on_frame: Callable[[Manifest], Awaitable[None] | None]
    ) -> None:
        self.client = client
        self._on_frame = on_frame
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def start(self, within: float = 10.0) -> None:
        self._task = asyncio.create_task(self._run(), name=f"shell-{self.client.endpoint}")
        async with asyncio.timeout(within):
            await self._ready.wait()

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def send_input(self, data: str) -> None:
        if self._ws is None or self._ws.closed:
            raise RequestError(ErrorCode.UPSTREAM_ERROR, "the shell stream to agentctl is not connected")
        await self._ws.send_str(json.dumps({"type": "input", "data": data}))

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                async with self.client.http.ws_connect(
                    self.client.ws_url(SHELL_STREAM_PATH), headers=self.client.headers, heartbeat=15.0
                ) as ws:
                    self._ws = ws
                    metrics.UPSTREAM_STREAMS.labels("shell").inc()
                    self._ready.set()
                    failures = 0
                    try:
                        async for msg in ws:
                            if msg.type != aiohttp.WSMsgType.TEXT:
                                break
                            frame = json.loads(msg.data)
                            if frame.get("type") in ("output", "exit"):
                                result = self._on_frame(frame)
                                if result is not None:
                                    await result
                    finally:
                        self._ws = None
                        metrics.UPSTREAM_STREAMS.labels("shell").dec()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.info("agentctl shell stream at %s dropped: %s", self.client.endpoint, exc)
            metrics.UPSTREAM_RECONNECTS.labels("shell").inc()
            await asyncio.sleep(_backoff(failures))
