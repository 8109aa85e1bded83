"""Gateway settings: `--flag` or `AGENTSESSION_GATEWAY_*` environment variable (see `agentsession.settings`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Self

from pydantic import Field, field_validator, model_validator

from agentsession.gateway.connection import QUEUE_BYTES, REQUEST_BYTES
from agentsession.gateway.origin import is_loopback, normalize_origin
from agentsession.gateway.upstream import SHELL_INPUT_BYTES, SHELL_QUEUE_BYTES
from agentsession.settings import LogFormat, LogLevel, StrList, WatchingSettings, load, settings_config


class GatewayConfig(WatchingSettings):
    """WebSocket gateway for AgentSessions: readiness, lazy initialization, history, live updates."""

    model_config = settings_config(
        "agentsession-gateway",
        "AGENTSESSION_GATEWAY_",
        # The singular flags predate the settings class; scripts and the chart repeat them.
        cli_shortcuts={"namespaces": "namespace", "token-audiences": "token-audience"},
    )

    host: str = Field(
        default="0.0.0.0", description="Address to listen on; insecure_dev_mode allows loopback only."
    )
    port: int = Field(default=8090, ge=1, le=65535, description="Port to listen on.")
    metrics_host: str = Field(default="0.0.0.0", description="Address of the metrics and probes listener.")
    metrics_port: int = Field(
        default=8091,
        ge=0,
        le=65535,
        description="Port of `/metrics`, `/healthz` and `/readyz`, apart from the clients' port; 0: none.",
    )
    kubeconfig: str | None = Field(
        default=None, description="Kubeconfig file; unset: the in-cluster account, else $KUBECONFIG."
    )
    namespaces: StrList = Field(
        default_factory=list, description="Namespaces to watch; empty: all namespaces."
    )
    insecure_dev_mode: bool = Field(
        default=False,
        description="DISABLE authentication and authorization: every client sees and controls every session. "
        "Listens on loopback only and serves loopback Host names only.",
    )
    allowed_origins: StrList = Field(
        default_factory=list,
        description="Browser origins (`https://console.example`) allowed on /ws besides the gateway's own.",
    )
    dev_warning_interval: float = Field(
        default=60.0, gt=0, description="Seconds between the warnings logged while insecure_dev_mode is on."
    )
    log_format: LogFormat = Field(default="text", description="`text` or `json` (one object per line).")
    log_level: LogLevel = Field(default="INFO", description="Least severe level logged.")
    queue_size: int = Field(
        default=1024,
        ge=1,
        description="Messages buffered per client before it is dropped as a slow consumer.",
    )
    queue_bytes: int = Field(
        default=QUEUE_BYTES,
        ge=1,
        description="Bytes of messages buffered per client before it is dropped as a slow consumer "
        "(a message always fits in an empty queue).",
    )
    max_requests_in_flight: int = Field(
        default=256,
        ge=1,
        description="Requests of one client answered at once; more are refused with `too_many_requests`.",
    )
    max_request_bytes_in_flight: int = Field(
        default=REQUEST_BYTES,
        ge=1,
        description="Bytes of the frames of one client's requests answered at once; more are refused with "
        "`too_many_requests` (a request always fits when none is in flight).",
    )
    shell_input_max_bytes: int = Field(
        default=SHELL_INPUT_BYTES,
        ge=1,
        description="Most bytes (UTF-8) of one `shell.input`; a longer one is refused with `validation_error`.",
    )
    shell_input_queue_bytes: int = Field(
        default=SHELL_QUEUE_BYTES,
        ge=1,
        description="Bytes of input one shell holds until agentctl takes them, whoever sent it; more is refused "
        "with `too_many_requests`.",
    )
    init_timeout: float = Field(
        default=120.0,
        gt=0,
        description="Seconds an initialize request waits for AgentctlReady and AgentInitialized.",
    )
    auth_cache_ttl: float = Field(
        default=60.0, ge=0, description="Seconds a token review or access review answer is reused."
    )
    auth_cache_size: int = Field(
        default=10_000,
        ge=1,
        description="Most answers each of those two caches keeps (oldest dropped first).",
    )
    auth_negative_cache_size: int = Field(
        default=1024,
        ge=1,
        description="Most rejected tokens remembered (10 s each), apart from accepted ones.",
    )
    auth_recheck_interval: float = Field(
        default=60.0,
        gt=0,
        description="Seconds between the reviews of an open connection's token and access; "
        "it is closed when either no longer holds, and at its token's expiry.",
    )
    auth_failure_burst: int = Field(
        default=10, ge=1, description="Failed authentications one client address may have in a row."
    )
    auth_failure_rate: float = Field(
        default=1.0,
        gt=0,
        description="Failed authentications per second one client address regains; beyond, it is answered 429.",
    )
    max_token_reviews: int = Field(default=16, ge=1, description="TokenReviews in flight at once.")
    max_connections_per_user: int = Field(
        default=32, ge=1, description="Open connections of one user; more are told `too_many_connections`."
    )
    token_audiences: StrList = Field(
        default_factory=list,
        description="Audiences a client's token must be valid for; empty: the API server's own.",
    )
    agentctl_host_override: str | None = Field(
        default=None, description="Reach every agentctl at this host instead of its pod IP (local testing)."
    )
    agentctl_key_file: Path | None = Field(
        default=None,
        description="File holding the release key each agentctl's token is derived from (the operator reads "
        "the same one); required. The chart mounts its Secret `<release>-agentctl-key` there.",
    )
    agentctl_port_override: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Reach every agentctl at this port instead of the session's (local testing).",
    )

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, values: list[str]) -> list[str]:
        normalized = []
        for value in values:
            origin = normalize_origin(value)
            if origin is None:
                raise ValueError(
                    f"{value!r} is not an origin: give scheme://host[:port], e.g. https://console.example"
                )
            normalized.append(origin)
        return normalized

    @model_validator(mode="after")
    def _dev_mode_on_loopback(self) -> Self:
        # With authentication off, only this machine may connect: a page that rebinds its own name to an address
        # this gateway listens on would otherwise drive every agent.
        if self.insecure_dev_mode and not is_loopback(self.host):
            if "host" in self.model_fields_set:
                raise ValueError(
                    f"insecure_dev_mode listens on loopback only, not on {self.host}: give --host 127.0.0.1 "
                    "(reach it from elsewhere through `kubectl port-forward` or an SSH tunnel)"
                )
            self.host = "127.0.0.1"
        return self


def parse_args(argv: Sequence[str] | None = None) -> GatewayConfig:
    return load(GatewayConfig, argv)
