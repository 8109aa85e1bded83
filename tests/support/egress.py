"""The egress proxy and a TLS stand-in for vendors' hosts as real processes on loopback, with a test CA.

The stand-in is the model stub serving HTTPS with a certificate for every vendor name; the proxy is told to find
those names on loopback (`--resolve`) and to trust the test CA (`--upstream-ca-file`), so nothing leaves the
machine while TLS is verified as it would be against the vendor.
"""

from __future__ import annotations

import asyncio
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.support.processes import free_port
from tests.support.tls import Authority

VENDOR_HOSTS = ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com")


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        return context


def make_certificates(directory: Path, names: Sequence[str]) -> Certificates:
    """A CA and a server certificate it signed for `names`."""
    authority = Authority(directory)
    leaf = authority.issue("server", *names)
    return Certificates(authority.cert, leaf.cert, leaf.key)


@dataclass
class Process:
    proc: asyncio.subprocess.Process
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    async def stop(self) -> None:
        """SIGTERM, as Kubernetes stops a pod: the proxy writes what it metered before it exits."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def _wait_http(
    url: str, process: Process, ssl_context: ssl.SSLContext | bool = True, within: float = 60
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    async with aiohttp.ClientSession() as http:
        while loop.time() < deadline:
            if process.proc.returncode is not None:
                raise AssertionError(
                    f"{url}: the process exited with {process.proc.returncode}:\n{process.log_tail()}"
                )
            try:
                async with http.get(url, ssl=ssl_context) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} did not answer 200 within {within}s:\n{process.log_tail()}")


async def _start(command: list[str], log: Path, env: dict[str, str] | None = None) -> Process:
    with log.open("ab") as sink:
        proc = await asyncio.create_subprocess_exec(*command, stdout=sink, stderr=sink, env=env)
    return Process(proc, log)


@asynccontextmanager
async def tls_stub(certificates: Certificates, log: Path) -> AsyncIterator[tuple[Process, int]]:
    """The model stub over HTTPS on a free loopback port."""
    port = free_port()
    command = [sys.executable, "-m", "agentsession.model_stub", "--host", "127.0.0.1", "--port", str(port),
               "--tls-cert", str(certificates.cert), "--tls-key", str(certificates.key), "--log-format", "json"]  # fmt: skip
    process = await _start(command, log)
    try:
        await _wait_http(f"https://127.0.0.1:{port}/healthz", process, _loopback_context(certificates))
        yield process, port
    finally:
        await process.stop()


def _loopback_context(certificates: Certificates) -> ssl.SSLContext:
    # The stand-in's certificate names the vendors, not 127.0.0.1: the health probe checks only that it answers.
    context = certificates.client_context()
    context.check_hostname = False
    return context


@dataclass
class Proxy:
    process: Process
    port: int
    metrics_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def metrics(self) -> str:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as response,
        ):
            return await response.text()


@asynccontextmanager
async def egress_proxy(
    args: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> AsyncIterator[Proxy]:
    """`python -m agentsession.egress_proxy` on free loopback ports, up once /readyz says its watches listed."""
    port, metrics_port = free_port(), free_port()
    command = [sys.executable, "-m", "agentsession.egress_proxy", "--host", "127.0.0.1", "--port", str(port),
               "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port), "--log-format", "json", *args]  # fmt: skip
    process = await _start(command, log, env)
    try:
        await _wait_http(f"http://127.0.0.1:{metrics_port}/readyz", process)
        yield Proxy(process, port, metrics_port)
    finally:
        await process.stop()
