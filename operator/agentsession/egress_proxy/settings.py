"""Egress proxy settings: `--flag` or `AGENTSESSION_EGRESS_*` environment variable (see `agentsession.settings`)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from pydantic import Field, field_validator

from agentsession.api.egress import HOST_PATTERN, Budget
from agentsession.settings import (
    IntList,
    LogFormat,
    LogLevel,
    StrList,
    WatchingSettings,
    load,
    settings_config,
)

PROG: Final = "agentsession-egress-proxy"
# What an agent's model API request may carry: Claude Code sends its whole conversation, tools and system prompt.
REQUEST_BYTES: Final = 64 * 1024 * 1024
_RESOLVE = re.compile(r"^(?P<host>[^=\s]+)=(?P<addr>\[[0-9a-fA-F:.]+\]|[0-9.]+):(?P<port>[0-9]{1,5})$")


def parse_resolve(entry: str) -> tuple[str, str, int]:
    """`HOST=ADDR:PORT` (an IPv6 ADDR in brackets) as (host, address, port)."""
    match = _RESOLVE.match(entry.strip())
    if match is None:
        raise ValueError(f"{entry!r} is not HOST=ADDR:PORT (e.g. api.anthropic.com=10.0.0.5:443)")
    address = match["addr"].strip("[]")
    ipaddress.ip_address(address)
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise ValueError(f"{entry!r}: port {port} is not in 1-65535")
    return match["host"].lower().rstrip("."), address, port


class ProxySettings(WatchingSettings):
    """The egress proxy of AgentSession pods: model calls with the real key put in, an allowlist for the rest."""

    model_config = settings_config(PROG, "AGENTSESSION_EGRESS_")

    host: str = Field(default="0.0.0.0", description="Address of the proxy listener.")
    port: int = Field(
        default=8080,
        ge=1,
        le=65535,
        description="Port of the proxy: /v1/model/<provider>/..., /v1/git/<host>/..., CONNECT and plain HTTP.",
    )
    metrics_host: str = Field(default="0.0.0.0", description="Address of the metrics and probes listener.")
    metrics_port: int = Field(
        default=8093, ge=1, le=65535, description="Port of `/metrics`, `/healthz` and `/readyz`."
    )
    kubeconfig: str | None = Field(
        default=None, description="Kubeconfig file; unset: the in-cluster account, else $KUBECONFIG."
    )
    namespaces: StrList = Field(
        default_factory=list, description="Namespaces whose sessions it serves; empty: all namespaces."
    )
    default_allow: StrList = Field(
        default_factory=list,
        description="Host patterns every session may reach (exact, or `*.` and a domain), besides its own and "
        "its namespace's (annotation agentsession.dev/egress-allow).",
    )
    default_budget: Budget = Field(
        default_factory=Budget,
        description='Limits for sessions whose spec and namespace set none, as JSON: {"maxCostUSD": "5"}.',
    )
    prices_file: Path | None = Field(
        default=None,
        description="YAML or JSON list of {provider, model (a glob), inputPerMTok, outputPerMTok, cachedPerMTok} "
        "in US dollars per million tokens; unset: every cost is 0.",
    )
    git_hosts: StrList = Field(
        default_factory=list,
        description="Git hosts served at /v1/git/<host>/, with the session's GIT_TOKEN added.",
    )
    connect_ports: IntList = Field(default=[443], description="Ports CONNECT may reach.")
    http_ports: IntList = Field(default=[80], description="Ports plain (absolute-URI) HTTP may reach.")
    resolve: StrList = Field(
        default_factory=list,
        description="HOST=ADDR:PORT, repeatable: connect to ADDR:PORT for HOST instead of asking DNS (TLS still "
        "checks HOST). Only such names may lead to loopback or link-local addresses.",
    )
    upstream_ca_file: Path | None = Field(
        default=None, description="PEM CA certificates trusted for upstream TLS besides the system's."
    )
    flush_interval_seconds: float = Field(
        default=1.0, gt=0, description="Seconds between writes of the sessions' usage to status.usage."
    )
    secret_cache_seconds: float = Field(
        default=30.0, ge=0, description="Seconds a session's credentials Secret is reused once read."
    )
    secret_cache_size: int = Field(default=1024, ge=1, description="Most Secrets cached (oldest dropped).")
    event_interval_seconds: float = Field(
        default=60.0, gt=0, description="Least seconds between EgressDenied Events of one session and host."
    )
    max_request_bytes: int = Field(
        default=REQUEST_BYTES, ge=1, description="Largest model API request body accepted."
    )
    max_connections: int = Field(
        default=1024, ge=1, description="Upstream connections open at once (model, git and plain HTTP)."
    )
    connect_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Seconds to connect to an upstream (TCP and TLS)."
    )
    read_timeout_seconds: float = Field(
        default=600.0,
        gt=0,
        description="Seconds an upstream may stay silent mid-answer before it is dropped.",
    )
    log_format: LogFormat = Field(default="text", description="`text` or `json` (one object per line).")
    log_level: LogLevel = Field(default="INFO", description="Least severe level logged.")

    @field_validator("default_allow", "git_hosts")
    @classmethod
    def _patterns(cls, values: list[str]) -> list[str]:
        lowered = [value.strip().lower() for value in values]
        for value in lowered:
            if not re.match(HOST_PATTERN, value):
                raise ValueError(f"{value!r} is not a host name or `*.` and a domain (e.g. *.pypi.org)")
        return lowered

    @field_validator("resolve")
    @classmethod
    def _resolve(cls, values: list[str]) -> list[str]:
        for value in values:
            parse_resolve(value)
        return values

    @field_validator("connect_ports", "http_ports")
    @classmethod
    def _ports(cls, values: list[int]) -> list[int]:
        for value in values:
            if not 1 <= value <= 65535:
                raise ValueError(f"port {value} is not in 1-65535")
        return values

    def resolved(self) -> dict[str, tuple[str, int]]:
        return {host: (address, port) for host, address, port in map(parse_resolve, self.resolve)}


def parse_args(argv: Sequence[str] | None = None) -> ProxySettings:
    return load(ProxySettings, argv)
