"""A pod's processes, seen from the host: the local cluster's node is this machine, so its containers' processes
are in this /proc. Elsewhere the lookups find nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentsession.contract.wire import TOKEN_ENV

PROC = Path("/proc")


@dataclass(frozen=True)
class Process:
    pid: int
    argv: tuple[str, ...]


def _processes() -> list[Process]:
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        found.append(Process(int(entry.name), tuple(part.decode(errors="replace") for part in argv if part)))
    return found


def agentctl_pid(token: str) -> int | None:
    """The agentctl process that holds `token` (the session's, in its environment)."""
    wanted = f"{TOKEN_ENV}={token}".encode()
    for process in _processes():
        if not any(part.endswith("agentctl") for part in process.argv[:2]):
            continue
        try:
            environ = (PROC / str(process.pid) / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in environ:
            return process.pid
    return None


def container_processes(container_id: str) -> list[Process]:
    """The processes of one container, by the ID its pod status gives (`containerd://<id>`, the prefix optional):
    the runtime names each container's cgroup after it."""
    bare = container_id.rpartition("://")[2]
    if not bare:
        return []
    found = []
    for process in _processes():
        try:
            cgroups = (PROC / str(process.pid) / "cgroup").read_text()
        except OSError:
            continue
        if bare in cgroups:
            found.append(process)
    return found
