"""A loopback TCP proxy the tests can cut, to drop the gateway's API watch the way a flaky network would."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import yaml


class CuttableProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.refusing = False
        self.port = 0
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start_in_thread(self) -> None:
        """Serves from a thread of its own, so tests that block their loop do not stall the proxy."""
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name="tcp-proxy")
        self._thread.start()
        ready.wait(10)

    def stop_thread(self) -> None:
        if self._loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(self.stop(), self._loop)
        with contextlib.suppress(Exception):
            future.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(10)

    def set_upstream(self, host: str, port: int) -> None:
        self._upstream = (host, port)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            return
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def cut(self) -> None:
        """Drops every open connection and refuses new ones until `restore`."""
        if self._loop is not None and threading.current_thread() is not self._thread:
            done = threading.Event()
            self._loop.call_soon_threadsafe(lambda: (self.cut(), done.set()))
            done.wait(5)
            return
        self.refusing = True
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.refusing = False

    async def stop(self) -> None:
        self.cut()
        if self._server:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


def kubeconfig_via(kubeconfig: str, port: int, dest: Path) -> tuple[str, int, str]:
    """Writes a copy of `kubeconfig` whose server is 127.0.0.1:port; returns the original (host, port) and the path."""
    doc: dict[str, Any] = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = doc["clusters"][0]["cluster"]
    hostport = cluster["server"].split("://", 1)[1]
    host, _, original = hostport.rpartition(":")
    cluster["server"] = f"https://127.0.0.1:{port}"
    dest.write_text(yaml.safe_dump(doc))
    return host, int(original), str(dest)
