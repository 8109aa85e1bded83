"""`agentctl` command."""

from __future__ import annotations

import logging
import socket
import sys

from agentsession.agentctl.config import ConfigError, parse_config
from agentsession.logs import setup_logging

log = logging.getLogger("agentsession.agentctl")


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


def main(argv: list[str] | None = None) -> int:
    try:
        config = parse_config(argv)
    except ConfigError as exc:
        print(f"agentctl: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_format, config.log_level)
    try:
        sock = listen(config.host, config.port)
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
        },
    )
    web.run_app(app, sock=sock, print=None, access_log=None, shutdown_timeout=5.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
