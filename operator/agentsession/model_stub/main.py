"""`agentsession-model-stub`: serves the scripted model APIs on one port."""

from __future__ import annotations

import argparse
import logging
import ssl
import sys

from aiohttp import web

from agentsession.logs import setup_logging
from agentsession.model_stub.app import create_app

log = logging.getLogger("agentsession.model_stub")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agentsession-model-stub",
        description="Scripted Anthropic, OpenAI Responses and Gemini APIs for running real agents without a model.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--tls-cert",
        help="PEM certificate chain: serve HTTPS, standing in for a vendor's API (with --tls-key)",
    )
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    context = None
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    setup_logging(args.log_format, args.log_level)
    log.info("model stub listening", extra={"host": args.host, "port": args.port, "tls": context is not None})
    web.run_app(
        create_app(),
        host=args.host,
        port=args.port,
        ssl_context=context,
        print=None,
        access_log=None,
        shutdown_timeout=2.0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
