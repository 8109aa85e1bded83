"""What /proc says about a process of this machine: its resident memory, when it started, and which agentctl
holds a given token. A pod's processes are visible here only where the cluster's node is this machine (the local
cluster); elsewhere the lookups find nothing and answer None or leave the token out.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from agentsession.contract.wire import TOKEN_ENV

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int, field: str = "VmRSS") -> int | None:
    """Resident set size (VmRSS; VmHWM: its peak so far); None once the process is gone."""
    try:
        status = (PROC / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return None


def started_at(pid: int) -> float | None:
    """When the process started, in seconds since boot: the clock of `time.monotonic()` on Linux."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may hold spaces; the fields after it are plain.
    return int(stat.rsplit(")", 1)[1].split()[19]) / CLOCK_TICKS


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU time the process has used; None once it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_by_command(commands: Iterable[str]) -> dict[str, float]:
    """CPU seconds used so far by the processes of each command name (as /proc/PID/comm gives it, at most 15
    characters); commands with no process here are left out."""
    wanted = set(commands)
    used: dict[str, float] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if command in wanted and (seconds := cpu_seconds(int(entry.name))) is not None:
            used[command] = used.get(command, 0.0) + seconds
    return used


def agentctl_pids(tokens: Iterable[str]) -> dict[str, int]:
    """The agentctl process of each token, found by the token in its environment (agentctl keeps it from the
    processes it starts, so only agentctl has it); tokens of no visible process are left out."""
    wanted = {f"{TOKEN_ENV}={token}".encode(): token for token in tokens}
    found: dict[str, int] = {}
    if not wanted:
        return found
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for variable in environ.split(b"\0"):
            token = wanted.get(variable)
            if token is not None:
                found[token] = int(entry.name)
    return found
