"""`agentsession-operator`: runs the kopf operator with `OperatorConfig`'s settings."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import kopf

from agentsession.controller import handlers  # noqa: F401  (importing registers the handlers)
from agentsession.controller.config import OperatorConfig
from agentsession.settings import load


def main(argv: Sequence[str] | None = None) -> None:
    config = load(OperatorConfig, argv)
    kopf.configure(log_format=kopf.LogFormat.JSON if config.log_format == "json" else kopf.LogFormat.FULL)
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if config.verbose else config.log_level)
    if root.level > logging.DEBUG:
        # kopf reports every handler success at INFO; the reconciler's own logs and Events say what matters.
        logging.getLogger("kopf.objects").setLevel(max(logging.WARNING, root.level))
    liveness = (
        f"http://{config.liveness_host}:{config.liveness_port}/healthz" if config.liveness_port else None
    )
    kopf.run(
        # Named namespaces are watched one by one (namespace-scoped RBAC suffices); patterns are served by a
        # cluster-wide watch that the handlers filter (see handlers._served).
        clusterwide=not config.watches_fixed_namespaces,
        namespaces=config.namespaces if config.watches_fixed_namespaces else [],
        standalone=True,
        liveness_endpoint=liveness,
        memo=kopf.Memo(config=config),
        # Importing handlers registered them in kopf's default registry.
        registry=kopf.get_default_registry(),
    )


if __name__ == "__main__":
    main()
