"""`agentctl` command."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence

from agentsession.logs import setup_logging

log = logging.getLogger("agentsession.agentctl")

PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the server and its libraries load: the kernel accepts a readiness probe's
    connection at once, and the probe is answered as soon as the server runs, within the probe's timeout, instead
    of being refused and repeated a period later."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def given_address(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, int] | None:
    """The address named by `--port` (and `--host`, default all interfaces) or their `AGENTCTL_*` variables, read
    without the settings library: loading it takes most of a second on a busy node, and the kubelet's first
    readiness probe comes sooner. None when no port is named or it is not a number; the full settings decide."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--host", default=environ.get("AGENTCTL_HOST") or "0.0.0.0")
    parser.add_argument("--port", default=environ.get("AGENTCTL_PORT") or None)
    try:
        known, _ = parser.parse_known_args(list(argv))
        return (known.host, int(known.port)) if known.port is not None else None
    except (SystemExit, ValueError):
        return None


def early_listen(argv: Sequence[str], environ: Mapping[str, str]) -> socket.socket | None:
    address = given_address(argv, environ)
    if address is None:
        return None
    try:
        return listen(*address)
    except OSError:
        return None  # reported with the settings' address below


def bound_to(sock: socket.socket, host: str, port: int) -> bool:
    """Whether `sock` listens where the settings say; a name such as `localhost` is bound again by the settings."""
    bound_host, bound_port = sock.getsockname()[:2]
    wanted = _packed(sock.family, host)
    return bound_port == port and wanted is not None and wanted == _packed(sock.family, bound_host)


def _packed(family: int, host: str) -> bytes | None:
    try:
        return socket.inet_pton(family, host)
    except OSError:
        return None


def keep_to_itself() -> None:
    """Makes agentctl non-dumpable: no other process of its user, the workspace shell it runs among them, may then
    read its environment (which holds its token) or its memory, or trace it. A no-op but on Linux."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning(
            "agentctl's token stays readable by its shell: prctl failed (errno %d)", ctypes.get_errno()
        )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    early = early_listen(args, os.environ)
    keep_to_itself()
    # Loaded once the port is taken (see given_address).
    from agentsession.agentctl.config import ConfigError, parse_config

    try:
        config = parse_config(args)
    except ConfigError as exc:
        print(f"agentctl: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_format, config.log_level)
    if early is not None and not bound_to(early, config.host, config.port):
        early.close()
        early = None
    try:
        sock = early or listen(config.host, config.port)
    except OSError as exc:
        log.error(
            "cannot listen on %s:%d: %s; is another process using the port?", config.host, config.port, exc
        )
        return 1
    # Loaded once the port is taken (see listen).
    from aiohttp import web

    from agentsession.agentctl.app import create_app

    try:
        app = create_app(config)
    except (OSError, ConnectionError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    log.info(
        "agentctl listening",
        extra={
            "host": config.host,
            "port": config.port,
            "transport": config.transport_name,
            "workdir": str(config.workdir),
            "state_dir": str(config.state_dir),
        },
    )
    web.run_app(app, sock=sock, print=None, access_log=None, shutdown_timeout=5.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
