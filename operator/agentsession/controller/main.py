"""`agentsession-operator`: runs the kopf operator with settings from AGENTSESSION_* variables."""

from __future__ import annotations

import argparse
import logging

import kopf

from agentsession.controller import (
    handlers,  # noqa: F401  (importing registers the handlers)
    namespace_listing,
)
from agentsession.controller.config import OperatorConfig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="agentsession-operator",
        description="Runs AgentSessions as pods. Settings come from AGENTSESSION_* environment variables.",
    )
    parser.add_argument("--liveness-port", type=int, default=8081, help="port of /healthz (0 turns it off)")
    parser.add_argument("--liveness-host", default="0.0.0.0")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)

    config = OperatorConfig()
    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if config.log_format == "json" else kopf.LogFormat.FULL,
    )
    if not args.verbose:
        # kopf reports every handler success at INFO; the reconciler's own logs and Events say what matters.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    namespace_listing.install()
    liveness = f"http://{args.liveness_host}:{args.liveness_port}/healthz" if args.liveness_port else None
    kopf.run(
        clusterwide=not config.namespaces,
        namespaces=config.namespaces,
        standalone=True,
        liveness_endpoint=liveness,
        memo=kopf.Memo(config=config),
        # Importing handlers registered them in kopf's default registry.
        registry=kopf.get_default_registry(),
    )


if __name__ == "__main__":
    main()
