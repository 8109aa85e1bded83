"""The agent container's shell, run for real: it stops the agent on the kubelet's SIGTERM after agentctl has
drained, instead of leaving an agent that ignores SIGTERM to the end of the grace period.

The test plays agentctl: it holds the FIFOs' other ends and answers the stop request.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentsession.api.constants import FIFO_DIR, STOP_REQUEST_FILE, STOPPED_FILE
from agentsession.controller.pod_builder import agent_wrapper

# An agent that announces itself, then neither reads nor handles signals: only SIGTERM's default action ends it.
AGENT = "import sys, time; print('up', flush=True); time.sleep(600)"
WAIT = 10.0


def wait_for(what: str, probe: Callable[[], bool], within: float = WAIT) -> None:
    deadline = time.monotonic() + within
    while not probe():
        assert time.monotonic() < deadline, f"{what} within {within}s"
        time.sleep(0.02)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Wrapper:
    def __init__(self, fifo_dir: Path, *agent: str) -> None:
        self.dir = fifo_dir
        script = agent_wrapper(["HOME"], extra_ca=False, drain_seconds=1).replace(FIFO_DIR, str(fifo_dir))
        env = {**os.environ, "HOME": str(fifo_dir / "home")}
        self.proc = subprocess.Popen(["sh", "-c", script, "agent", *agent], env=env)

    def make_fifos(self) -> None:
        """What agentctl does at its start; the test then holds the ends agentctl would."""
        for name in ("agent.in", "agent.out"):
            os.mkfifo(self.dir / name)
        self.to_agent = os.open(self.dir / "agent.in", os.O_RDWR)
        self.from_agent = os.open(self.dir / "agent.out", os.O_RDWR)

    def read_line(self) -> bytes:
        data = b""
        while not data.endswith(b"\n"):
            data += os.read(self.from_agent, 1)
        return data

    def agent_pid(self) -> int:
        wait_for("the agent started as the shell's child", lambda: bool(children(self.proc.pid)))
        return children(self.proc.pid)[0]


@pytest.fixture
def wrapper(tmp_path: Path) -> Iterator[Callable[..., Wrapper]]:
    started: list[Wrapper] = []

    def start(*agent: str) -> Wrapper:
        w = Wrapper(tmp_path, *agent)
        started.append(w)
        return w

    yield start
    for w in started:
        for pid in children(w.proc.pid):
            os.kill(pid, signal.SIGKILL)
        w.proc.kill()
        w.proc.wait()


def stopped_by_the_kubelet(wrapper: Callable[..., Wrapper]) -> tuple[Wrapper, int]:
    """A running agent whose container got SIGTERM, once the shell has asked agentctl to drain; and its pid."""
    w = wrapper(sys.executable, "-c", AGENT)
    w.make_fifos()
    assert w.read_line() == b"up\n"
    agent = w.agent_pid()
    w.proc.send_signal(signal.SIGTERM)
    wait_for("the stop request", (w.dir / STOP_REQUEST_FILE).exists)
    return w, agent


def test_sigterm_asks_agentctl_to_drain_then_stops_the_agent(wrapper: Callable[..., Wrapper]) -> None:
    w, agent = stopped_by_the_kubelet(wrapper)
    # Draining: the agent keeps running until agentctl says it is done.
    time.sleep(0.3)
    assert alive(agent)
    assert w.proc.poll() is None

    (w.dir / STOPPED_FILE).touch()
    w.proc.wait(timeout=WAIT)
    assert not alive(agent)


def test_an_agent_that_exits_by_itself_gives_its_exit_code(wrapper: Callable[..., Wrapper]) -> None:
    w = wrapper(sys.executable, "-c", "import sys; print('up', flush=True); sys.exit(3)")
    w.make_fifos()
    assert w.read_line() == b"up\n"
    assert w.proc.wait(timeout=WAIT) == 3
    assert not (w.dir / STOP_REQUEST_FILE).exists()


def test_an_agent_gone_during_the_drain_ends_the_wait(wrapper: Callable[..., Wrapper]) -> None:
    w, agent = stopped_by_the_kubelet(wrapper)
    os.kill(agent, signal.SIGKILL)
    w.proc.wait(timeout=WAIT)


def test_sigterm_before_agentctl_made_the_fifos_exits_at_once(wrapper: Callable[..., Wrapper]) -> None:
    w = wrapper(sys.executable, "-c", AGENT)
    # HOME is made just before the wait for the FIFOs.
    wait_for("the shell waiting for the FIFOs", (w.dir / "home").is_dir)
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=WAIT) == 143
    assert children(w.proc.pid) == []
