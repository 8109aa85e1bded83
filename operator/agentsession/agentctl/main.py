"""`agentctl` command."""

from __future__ import annotations

import logging
import sys

from aiohttp import web

from agentsession.agentctl.app import create_app
from agentsession.agentctl.config import ConfigError, parse_config
from agentsession.logs import setup_logging

log = logging.getLogger("agentsession.agentctl")


def main(argv: list[str] | None = None) -> int:
    try:
        config = parse_config(argv)
    except ConfigError as exc:
        print(f"agentctl: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_format, config.log_level)
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
    web.run_app(app, host=config.host, port=config.port, print=None, access_log=None, shutdown_timeout=5.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
