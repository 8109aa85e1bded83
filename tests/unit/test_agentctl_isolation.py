"""agentctl's side of keeping its state from the agent: its state directory and the terminal's HOME private to
its user, the terminal's umask, and the FIFO pair and stop files in a directory the agent writes too, where a
link put in a file's place must not lead agentctl elsewhere."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsession.agentctl.config import ConfigError, parse_config
from agentsession.agentctl.drain import say_stopped
from agentsession.agentctl.services import Services
from agentsession.agentctl.shell import ShellSession, terminal_home
from agentsession.agentctl.transport_fifo import FifoTransport, ensure_fifos, open_fifo

WAIT = 10.0


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """agentctl's own umask as a careless image might leave it, to show the modes do not depend on it."""
    old = os.umask(0o000)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_state_directory_is_agentctls_alone(tmp_path: Path, loose_umask: None) -> None:
    config = parse_config(["--workdir", str(tmp_path), "--state-dir", str(tmp_path / "state"), "--no-auth"])
    services = Services.build(config)
    try:
        assert mode(tmp_path / "state") == 0o700
        assert services.journal.path == tmp_path / "state" / "history.jsonl"
    finally:
        services.journal.close()


def test_the_terminals_home_is_made_private_and_an_existing_one_left_alone(tmp_path: Path) -> None:
    made = terminal_home({"HOME": str(tmp_path / "agentctl" / "home")}, tmp_path)
    assert made == tmp_path / "agentctl" / "home"
    assert mode(made) == 0o700
    existing = tmp_path / "mine"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    assert terminal_home({"HOME": str(existing)}, tmp_path) == existing
    assert mode(existing) == 0o755
    # No HOME at all: the working directory, as before.
    assert terminal_home({}, tmp_path) == tmp_path


async def _output_of(session: ShellSession, script: str) -> str:
    queue = session.subscribe()
    await session.write(f"{script}\necho end-of-$((6 * 7))\n")
    output = ""
    async with asyncio.timeout(WAIT):
        while "end-of-42" not in output:
            text = await queue.get()
            assert text is not None, output
            output += text
    return output.replace("\r", "")


@pytest.mark.parametrize(("umask", "shown"), [(0o002, "0002"), (0o027, "0027"), (None, "0077")])
async def test_the_terminal_runs_with_the_umask_it_is_given(
    tmp_path: Path, umask: int | None, shown: str
) -> None:
    home = tmp_path / "home"
    session = ShellSession(
        ("/bin/sh",), tmp_path, {"PATH": os.environ["PATH"], "HOME": str(home)}, umask=umask
    )
    old = os.umask(0o077)  # agentctl's own, which the terminal keeps when given none
    try:
        output = await _output_of(session, 'echo "mask=$(umask) home=$HOME"')
    finally:
        os.umask(old)
        await session.close()
    assert f"mask={shown} home={home}\n" in output
    assert mode(home) == 0o700


def test_the_fifo_pair_is_the_groups_whatever_agentctls_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        paths = ensure_fifos(tmp_path)
    finally:
        os.umask(old)
    for path in paths:
        assert stat.S_ISFIFO(path.lstat().st_mode)
        assert mode(path) == 0o660


def test_a_link_in_a_fifos_place_is_refused(tmp_path: Path) -> None:
    journal = tmp_path / "history.jsonl"
    journal.write_text("the journal\n")
    fifos = tmp_path / "fifo"
    agent_in, agent_out = ensure_fifos(fifos)
    agent_out.unlink()
    agent_out.symlink_to(journal)
    with pytest.raises(OSError, match="symbolic links"):
        open_fifo(agent_out, os.O_RDONLY)
    # A file the agent made in a FIFO's place is refused too, and left as it is.
    agent_in.unlink()
    agent_in.write_text("")
    with pytest.raises(ConnectionError, match="is not a FIFO"):
        open_fifo(agent_in, os.O_WRONLY)
    with pytest.raises(ConnectionError, match="exists and is not a FIFO"):
        FifoTransport(fifos)
    assert journal.read_text() == "the journal\n"


def test_a_fifo_opens_as_one(tmp_path: Path) -> None:
    _, agent_out = ensure_fifos(tmp_path)
    fd = open_fifo(agent_out, os.O_RDONLY)
    try:
        assert stat.S_ISFIFO(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def test_the_stopped_file_is_written_and_a_link_in_its_place_is_not_followed(tmp_path: Path) -> None:
    say_stopped(tmp_path / "stopped")
    assert (tmp_path / "stopped").is_file()
    target = tmp_path / "elsewhere"
    (tmp_path / "planted").symlink_to(target)
    say_stopped(tmp_path / "planted")  # logged, not raised: the agent's wrapper waits out its own bound
    assert not target.exists()


@pytest.mark.parametrize("value", ["9", "0888", "2", "u=rwx"])
def test_a_shell_umask_must_be_octal(tmp_path: Path, value: str) -> None:
    with pytest.raises((ConfigError, SystemExit)):
        parse_config(["--workdir", str(tmp_path), "--no-auth", "--shell-umask", value])


def test_no_shell_umask_leaves_agentctls_own(tmp_path: Path) -> None:
    assert parse_config(["--workdir", str(tmp_path), "--no-auth"]).shell_umask is None
    assert (
        parse_config(["--workdir", str(tmp_path), "--no-auth", "--shell-umask", "0022"]).shell_umask == 0o022
    )
