"""`kubectl agentsession` for tests: the plugin built as `make plugin` builds it, installed as its docs say (the
one file copied onto the PATH as `kubectl-agentsession`) and run through kubectl as a real process, its output kept
so a test can wait for a line."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from agentsession.kubectl_plugin import build

# The folders of built plugins, removed when the test run ends.
_BUILT: list[tempfile.TemporaryDirectory[str]] = []


@functools.cache
def built_plugin() -> Path:
    """The plugin's one file, built once per test run by the code `make plugin` runs."""
    folder = tempfile.TemporaryDirectory(prefix="kubectl-agentsession-")
    _BUILT.append(folder)
    return build.build(Path(folder.name) / "kubectl-agentsession")


def install_plugin(bin_dir: Path) -> Path:
    """Copies the plugin's one file into `bin_dir` as an executable `kubectl-agentsession`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / "kubectl-agentsession"
    shutil.copyfile(built_plugin(), target)
    target.chmod(0o755)
    return target


def plugin_path(bin_dir: Path, kubectl: str) -> str:
    """A PATH where kubectl finds the plugin, and the plugin's `python3` has the project's dependencies."""
    return os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), str(Path(kubectl).parent),
                            os.environ.get("PATH", "")])  # fmt: skip


class PluginRun:
    """One `kubectl agentsession ...` process: stdin to write, stdout collected, stderr kept for failures."""

    def __init__(self, proc: asyncio.subprocess.Process, args: tuple[str, ...]) -> None:
        self.proc = proc
        self.args = args
        self.stdout = ""
        self.stderr = ""
        self._changed = asyncio.Event()
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._readers = [
            asyncio.create_task(self._collect(proc.stdout, "stdout")),
            asyncio.create_task(self._collect(proc.stderr, "stderr")),
        ]

    @classmethod
    async def start(cls, kubectl: str, path: str, *args: str, env: dict[str, str] | None = None) -> PluginRun:
        proc = await asyncio.create_subprocess_exec(
            kubectl, "agentsession", *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PATH": path, **(env or {})},
        )  # fmt: skip
        return cls(proc, args)

    async def _collect(self, stream: asyncio.StreamReader, name: str) -> None:
        while chunk := await stream.read(4096):
            setattr(self, name, getattr(self, name) + chunk.decode(errors="replace"))
            self._changed.set()

    def __repr__(self) -> str:
        return f"kubectl agentsession {' '.join(self.args)}\n--- stdout:\n{self.stdout}\n--- stderr:\n{self.stderr}"

    async def expect(self, text: str, within: float = 60.0) -> None:
        """Until stdout holds `text`; fails with everything the plugin printed."""
        try:
            async with asyncio.timeout(within):
                while text not in self.stdout:
                    if self.proc.returncode is not None and all(r.done() for r in self._readers):
                        raise AssertionError(
                            f"the plugin exited ({self.proc.returncode}) before printing {text!r}"
                        )
                    self._changed.clear()
                    with_exit = asyncio.ensure_future(self.proc.wait())
                    changed = asyncio.ensure_future(self._changed.wait())
                    await asyncio.wait({with_exit, changed}, return_when=asyncio.FIRST_COMPLETED)
                    changed.cancel()
                    with_exit.cancel()
        except (TimeoutError, AssertionError) as exc:
            raise AssertionError(
                f"no {text!r} in the plugin's output ({exc or 'timeout'}):\n{self}"
            ) from None

    async def write(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        await self.proc.stdin.drain()

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await self.proc.stdin.wait_closed()

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    async def exit_code(self, within: float = 60.0) -> int:
        try:
            async with asyncio.timeout(within):
                code = await self.proc.wait()
                await asyncio.gather(*self._readers)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"the plugin did not exit within {within:.0f}s:\n{self}") from None
        return code


async def run_plugin(
    kubectl: str, path: str, *args: str, stdin: str = "", within: float = 90.0
) -> tuple[int, PluginRun]:
    """Runs the plugin to its end with `stdin` piped in; (exit status, the run)."""
    run = await PluginRun.start(kubectl, path, *args)
    if stdin:
        await run.write(stdin)
    await run.close_stdin()
    return await run.exit_code(within), run
