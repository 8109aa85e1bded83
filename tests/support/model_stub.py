"""The model stub as a real process on loopback, and a reader of the server-sent events it streams."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.processes import BIN


async def received_by(http: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    """What the stub at `url` has received so far (its `/requests`), wherever it runs."""
    async with http.get(f"{url}/requests") as resp:
        assert resp.status == 200
        received: list[dict[str, Any]] = await resp.json()
        return received


@dataclass
class ModelStub:
    proc: asyncio.subprocess.Process
    port: int
    log: Path
    http: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    async def requests(self) -> list[dict[str, Any]]:
        return await received_by(self.http, self.url)

    async def clear(self) -> None:
        async with self.http.delete(f"{self.url}/requests") as resp:
            assert resp.status == 200


@asynccontextmanager
async def model_stub(port: int, log: Path, http: aiohttp.ClientSession) -> AsyncIterator[ModelStub]:
    command = [str(BIN / "agentsession-model-stub"), "--port", str(port), "--log-format", "json"]
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(*command, stdout=sink, stderr=sink)
    stub = ModelStub(proc, port, log, http)
    try:
        for _ in range(200):
            if proc.returncode is not None:
                raise AssertionError(f"model stub exited with {proc.returncode}: {stub.log_tail()}")
            try:
                async with http.get(f"{stub.url}/healthz") as resp:
                    if resp.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"model stub never answered /healthz: {stub.log_tail()}")
        yield stub
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()


async def sse_events(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str | None, dict[str, Any]]]:
    """Yields (event name, JSON data) per event as it arrives."""
    name: str | None = None
    data: list[str] = []
    async for raw in resp.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("event:"):
            name = line[len("event:") :].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:") :].strip())
        elif not line and data:
            yield name, json.loads("\n".join(data))
            name, data = None, []
