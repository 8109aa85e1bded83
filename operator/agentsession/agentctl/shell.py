"""A login shell on a PTY in the workspace, with the last 16 KiB of its output kept for late joiners."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import functools
import logging
import os
import pty
import signal
import struct
import termios
from pathlib import Path
from typing import Any

from agentsession.agentctl.clock import utc_now
from agentsession.tasks import Supervisor

log = logging.getLogger(__name__)

BUFFER_BYTES = 16 * 1024
QUEUE_LIMIT = 1000


def _prepare_child(umask: int | None) -> None:
    # Runs in the child after setsid(): stdin is the PTY slave, so job control and ^C work in the shell.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    if umask is not None:
        os.umask(umask)


def terminal_home(env: dict[str, str], cwd: Path) -> Path:
    """The shell's HOME, made if it is missing, private to agentctl's user: a login shell runs the profiles it
    finds there, so nobody else may write it. An existing HOME is left as it is."""
    home = Path(env.get("HOME") or cwd)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home


class ShellSession:
    def __init__(
        self, command: tuple[str, ...], cwd: Path, env: dict[str, str], *, umask: int | None = None
    ) -> None:
        self._command = command
        self._cwd = cwd
        self._env = env
        self._umask = umask
        self._proc: asyncio.subprocess.Process | None = None
        self._master: int | None = None
        self._ring = bytearray()
        self._subscribers: set[asyncio.Queue[str | None]] = set()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._lock = asyncio.Lock()
        self.exit_code: int | None = None
        self.last_input_at: str | None = None
        # Reapers of exited shells. close() leaves them be: the one it causes still records how the shell ended.
        self._tasks = Supervisor("shell", log)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def status(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "pid": self._proc.pid if self.running and self._proc else None,
            "cwd": str(self._cwd),
            "command": list(self._command),
            "buffer_bytes": len(self._ring),
            "clients": len(self._subscribers),
            "exit_code": self.exit_code,
        }

    def buffer(self) -> str:
        return bytes(self._ring).decode("utf-8", "replace")

    async def ensure_started(self) -> None:
        async with self._lock:
            if self.running:
                return
            env = dict(self._env)
            env.setdefault("TERM", "xterm-256color")
            env["HOME"] = str(terminal_home(env, self._cwd))
            master, slave = pty.openpty()
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *self._command,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    cwd=self._cwd,
                    env=env,
                    start_new_session=True,
                    preexec_fn=functools.partial(_prepare_child, self._umask),
                )
            except OSError:
                os.close(master)
                raise
            finally:
                os.close(slave)
            os.set_blocking(master, False)
            self._master = master
            self.exit_code = None
            self._decoder.reset()
            asyncio.get_running_loop().add_reader(master, self._on_readable)
            log.info("shell started", extra={"pid": self._proc.pid, "cwd": str(self._cwd)})

    def _on_readable(self) -> None:
        assert self._master is not None
        try:
            data = os.read(self._master, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""  # EIO: the shell and everything on the PTY has gone
        if not data:
            self._closed()
            return
        self._ring += data
        if len(self._ring) > BUFFER_BYTES:
            del self._ring[: len(self._ring) - BUFFER_BYTES]
        text = self._decoder.decode(data)
        if text:
            for q in list(self._subscribers):
                if q.full():
                    self._subscribers.discard(q)
                    q.get_nowait()
                    q.put_nowait(None)  # too slow: close it; the client reconnects and reads the buffer
                else:
                    q.put_nowait(text)

    def _closed(self) -> None:
        master, self._master = self._master, None
        if master is not None:
            asyncio.get_running_loop().remove_reader(master)
            os.close(master)
        for q in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(None)
        self._subscribers.clear()
        proc = self._proc
        if proc is not None:
            self._tasks.spawn(self._reap(proc), "reap")

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        self.exit_code = await proc.wait()
        log.info("shell exited", extra={"exit_code": self.exit_code})

    def subscribe(self) -> asyncio.Queue[str | None]:
        q: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_LIMIT)
        self._subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[str | None]) -> None:
        self._subscribers.discard(q)

    async def write(self, data: str) -> None:
        self.last_input_at = utc_now()
        await self.ensure_started()
        assert self._master is not None
        payload = data.encode()
        while payload:
            try:
                n = os.write(self._master, payload)
            except BlockingIOError:
                await asyncio.sleep(0.01)  # PTY input queue full; the shell will drain it
                continue
            payload = payload[n:]

    def resize(self, cols: int, rows: int) -> None:
        if self._master is not None:
            fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGHUP)
            try:
                await asyncio.wait_for(proc.wait(), 3.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        if self._master is not None:
            self._closed()
        for q in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(None)
