"""Fixtures for component tests of agentctl: real agentctl processes, the real demo agent, real clients."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import websockets

from agentsession.contract.auth import INSTANCE_HEADER, authorization

VENV_BIN = Path(sys.executable).parent
TOKEN = "component-test-token"
DEFAULT_WAIT = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


async def wait_until(
    check: Callable[[], Awaitable[Any]], what: str, within: float = DEFAULT_WAIT, interval: float = 0.05
) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` on timeout."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last value: {last!r}")


@dataclass
class Agentctl:
    proc: asyncio.subprocess.Process
    port: int
    workdir: Path
    log_path: Path
    http: aiohttp.ClientSession
    token: str = TOKEN
    instance: str = ""  # what agentctl named itself on /health: signatures are for this process only
    sockets: list[Any] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def signed(self, method: str, path: str) -> dict[str, str]:
        """The Authorization header of one request (`path` with its query, as sent); new each call."""
        return {"Authorization": authorization(self.token, self.instance, method, path)}

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        headers = {**self.signed(method, path), **kw.pop("headers", {})}
        data = kw.pop("data", None)
        if body is not None:
            data = json.dumps(body)
        async with self.http.request(method, self.base + path, data=data, headers=headers, **kw) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.request("POST", path, body, **kw)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, data = await self.request(method, path, body)
        assert status == 200, f"{method} {path} -> {status} {data}"
        return data

    async def status(self) -> dict[str, Any]:
        data: dict[str, Any] = await self.ok("GET", "/api/v1/status")
        return data

    async def ws(self, path: str) -> Any:
        conn = await websockets.connect(
            f"ws://127.0.0.1:{self.port}{path}", additional_headers=self.signed("GET", path), max_size=None
        )
        self.sockets.append(conn)
        return conn

    async def history(self, after: int = 0) -> list[dict[str, Any]]:
        data = await self.ok("GET", f"/api/v1/history?after={after}")
        updates: list[dict[str, Any]] = data["updates"]
        return updates

    async def wait_turn_end(self, count: int = 1, within: float = DEFAULT_WAIT) -> list[dict[str, Any]]:
        async def done() -> list[dict[str, Any]] | None:
            h = await self.history()
            return h if sum(e["kind"] == "turn_end" for e in h) >= count else None

        result: list[dict[str, Any]] = await wait_until(done, f"{count} turn_end entries", within)
        return result

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        for s in self.sockets:
            await s.close()
        self.sockets.clear()
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        return self.proc.returncode or 0


async def launch(
    workdir: Path,
    http: aiohttp.ClientSession,
    *args: str,
    log_path: Path | None = None,
    token: str = TOKEN,
    port: int | None = None,
    env: dict[str, str] | None = None,
) -> Agentctl:
    port = port or free_port()
    log_path = log_path or workdir.parent / f"agentctl-{port}.log"
    cmd = [
        str(VENV_BIN / "agentctl"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workdir",
        str(workdir),
        "--log-format",
        "json",
        *args,
    ]
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdout=log,
            stderr=log,
            env=child_env(AGENTCTL_TOKEN=token, **(env or {})),
            start_new_session=True,
        )
    ctl = Agentctl(proc, port, workdir, log_path, http, token)

    async def healthy() -> bool:
        if proc.returncode is not None:
            raise AssertionError(f"agentctl exited with {proc.returncode}: {ctl.log()[-2000:]}")
        try:
            async with http.get(f"{ctl.base}/health") as resp:
                ctl.instance = resp.headers.get(INSTANCE_HEADER, "")
                return resp.status == 200
        except aiohttp.ClientConnectionError:
            return False

    await wait_until(healthy, "agentctl /health")
    return ctl


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


@pytest.fixture
async def spawn(
    workdir: Path, http: aiohttp.ClientSession
) -> AsyncIterator[Callable[..., Awaitable[Agentctl]]]:
    started: list[Agentctl] = []

    async def _spawn(*args: str, **kw: Any) -> Agentctl:
        ctl = await launch(workdir, http, *args, **kw)
        started.append(ctl)
        return ctl

    yield _spawn
    for ctl in started:
        await ctl.stop()


@pytest.fixture
async def agentctl(spawn: Callable[..., Awaitable[Agentctl]]) -> Agentctl:
    return await spawn("--permission-timeout", "3", "--shell", "/bin/sh")


class FifoAgent:
    """The agent container of the pod: `sh -c 'exec "$@" <agent.in >agent.out' -- agentsession-demo-agent`."""

    def __init__(self, fifo_dir: Path, workdir: Path) -> None:
        self.fifo_dir = fifo_dir
        self.workdir = workdir
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        await wait_until(self._fifos_exist, "agentctl to create the FIFOs", interval=0.02)
        self.proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            f'exec "$@" <{self.fifo_dir}/agent.in >{self.fifo_dir}/agent.out',
            "--",
            str(VENV_BIN / "agentsession-demo-agent"),
            cwd=self.workdir,
            env=child_env(),
            start_new_session=True,
        )

    async def _fifos_exist(self) -> bool:
        return (self.fifo_dir / "agent.in").exists() and (self.fifo_dir / "agent.out").exists()

    async def kill(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        return await self.proc.wait()


@pytest.fixture
async def fifo_agentctl(
    tmp_path: Path, workdir: Path, spawn: Callable[..., Awaitable[Agentctl]]
) -> AsyncIterator[tuple[Agentctl, FifoAgent]]:
    fifo_dir = tmp_path / "run-agentctl"
    ctl = await spawn("--agent-fifo-dir", str(fifo_dir), "--permission-timeout", "3")
    agent = FifoAgent(fifo_dir, workdir)
    await agent.start()
    yield ctl, agent
    await ctl.stop()
    if agent.proc is not None and agent.proc.returncode is None:
        await agent.kill()


async def frames_until(
    ws: Any, stop: Callable[[dict[str, Any]], bool], within: float = DEFAULT_WAIT
) -> list[dict[str, Any]]:
    """Read JSON frames until one satisfies `stop` (included)."""
    out: list[dict[str, Any]] = []

    async def read() -> None:
        while True:
            frame = json.loads(await ws.recv())
            out.append(frame)
            if stop(frame):
                return

    try:
        await asyncio.wait_for(read(), within)
    except TimeoutError:
        raise AssertionError(f"no matching frame within {within}s; got {out[-5:]}") from None
    return out


def update_kind(entry: dict[str, Any]) -> str | None:
    if entry.get("kind") != "session_update":
        return None
    kind: str = entry["notification"]["update"]["sessionUpdate"]
    return kind


def message_text(entries: list[dict[str, Any]]) -> str:
    return "".join(
        e["notification"]["update"]["content"]["text"]
        for e in entries
        if update_kind(e) == "agent_message_chunk"
    )
