"""Gateway settings: command-line flags, each with an `AGENTSESSION_GATEWAY_*` environment default (the chart's way)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

ENV_PREFIX = "AGENTSESSION_GATEWAY_"


@dataclass
class GatewayConfig:
    host: str = "0.0.0.0"
    port: int = 8090
    kubeconfig: str | None = None
    namespaces: list[str] = field(default_factory=list)
    insecure_dev_mode: bool = False
    dev_warning_interval: float = 60.0
    log_format: str = "text"
    log_level: str = "INFO"
    queue_size: int = 1024
    init_timeout: float = 120.0
    auth_cache_ttl: float = 60.0
    auth_cache_size: int = 10_000
    token_audiences: list[str] = field(default_factory=list)
    watch_inactivity_timeout: float = 60.0
    watch_server_timeout: int = 300
    agentctl_host_override: str | None = None
    agentctl_port_override: int | None = None


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name.upper(), default)


def _bool_env(name: str) -> bool:
    return (_env(name, "") or "").strip().lower() in ("1", "true", "yes")


def parse_args(argv: list[str] | None = None) -> GatewayConfig:
    d = GatewayConfig()
    p = argparse.ArgumentParser(
        prog="agentsession-gateway",
        description="WebSocket gateway for AgentSessions: readiness, lazy initialization, history, live updates.",
    )
    p.add_argument("--host", default=_env("host", d.host))
    p.add_argument("--port", type=int, default=int(_env("port", str(d.port)) or d.port))
    p.add_argument("--kubeconfig", default=_env("kubeconfig"), help="default: in-cluster, else $KUBECONFIG")
    p.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        default=[n for n in (_env("namespaces", "") or "").split(",") if n],
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    p.add_argument(
        "--insecure-dev-mode",
        action="store_true",
        default=_bool_env("insecure_dev_mode"),
        help="DISABLE authentication and authorization: every client sees and controls every session",
    )
    p.add_argument("--log-format", choices=("text", "json"), default=_env("log_format", d.log_format))
    p.add_argument("--log-level", default=_env("log_level", d.log_level))
    p.add_argument("--queue-size", type=int, default=int(_env("queue_size", str(d.queue_size)) or d.queue_size),
                   help="messages buffered per client before it is dropped as a slow consumer")  # fmt: skip
    p.add_argument("--init-timeout", type=float, default=float(_env("init_timeout", str(d.init_timeout)) or 0),
                   help="seconds initialize_agent_request waits for AgentctlReady and AgentInitialized")  # fmt: skip
    p.add_argument(
        "--auth-cache-ttl", type=float, default=float(_env("auth_cache_ttl", str(d.auth_cache_ttl)) or 0)
    )
    p.add_argument("--token-audience", dest="token_audiences", action="append", default=[])
    p.add_argument("--watch-inactivity-timeout", type=float,
                   default=float(_env("watch_inactivity_timeout", str(d.watch_inactivity_timeout)) or 0))  # fmt: skip
    p.add_argument("--agentctl-host-override", default=_env("agentctl_host_override"),
                   help="reach every agentctl at this host instead of its pod IP (local testing)")  # fmt: skip
    p.add_argument("--agentctl-port-override", type=int, default=None)
    args = p.parse_args(argv)
    return GatewayConfig(
        host=args.host,
        port=args.port,
        kubeconfig=args.kubeconfig,
        namespaces=args.namespaces,
        insecure_dev_mode=args.insecure_dev_mode,
        log_format=args.log_format,
        log_level=args.log_level,
        queue_size=args.queue_size,
        init_timeout=args.init_timeout,
        auth_cache_ttl=args.auth_cache_ttl,
        token_audiences=args.token_audiences,
        watch_inactivity_timeout=args.watch_inactivity_timeout,
        agentctl_host_override=args.agentctl_host_override,
        agentctl_port_override=args.agentctl_port_override,
    )
