"""`agentsession-gateway`: serve the WebSocket gateway."""

from __future__ import annotations

import logging

from aiohttp import web

from agentsession.contract.auth import require_key
from agentsession.gateway.config import parse_args
from agentsession.gateway.server import build_app, close_all, serve_metrics
from agentsession.logs import setup_logging

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> None:
    config = parse_args(argv)
    # The release key is read as the app starts (`server.build_app`); a missing or short one stops it here.
    require_key(
        config.agentctl_key_file,
        "agentsession-gateway",
        "--agentctl-key-file",
        "give the file the operator reads",
    )
    setup_logging(config.log_format, config.log_level)
    app = build_app(config)
    app.on_shutdown.append(close_all)
    if config.metrics_port:
        app.cleanup_ctx.append(serve_metrics(config))
        log.info("metrics and probes on %s:%d", config.metrics_host, config.metrics_port)
    log.info("gateway listening on %s:%d", config.host, config.port)
    web.run_app(app, host=config.host, port=config.port, print=None, access_log=None, shutdown_timeout=5)


if __name__ == "__main__":
    main()
