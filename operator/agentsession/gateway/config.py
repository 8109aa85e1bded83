"""Gateway settings: `--flag` or `AGENTSESSION_GATEWAY_*` environment variable (see `agentsession.settings`)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field
from pydantic_settings import BaseSettings

from agentsession.gateway.connection import QUEUE_BYTES, REQUEST_BYTES
from agentsession.gateway.upstream import SHELL_INPUT_BYTES, SHELL_QUEUE_BYTES
from agentsession.settings import LogFormat, LogLevel, StrList, load, settings_config


class GatewayConfig(BaseSettings):
    """WebSocket gateway for AgentSessions: readiness, lazy initialization, history, live updates."""

    model_config = settings_config(
        "agentsession-gateway",
        "AGENTSESSION_GATEWAY_",
        # The singular flags predate the settings class; scripts and the chart repeat them.
        cli_shortcuts={"namespaces": "namespace", "token-audiences": "token-audience"},
    )

    host: str = Field(default="0.0.0.0", description="Address to listen on.")
    port: int = Field(default=8090, ge=1, le=65535, description="Port to listen on.")
    kubeconfig: str | None = Field(
        default=None, description="Kubeconfig file; unset: the in-cluster account, else $KUBECONFIG."
    )
    namespaces: StrList = Field(
        default_factory=list, description="Namespaces to watch; empty: all namespaces."
    )
    insecure_dev_mode: bool = Field(
        default=False,
        description="DISABLE authentication and authorization: every client sees and controls every session.",
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
    token_audiences: StrList = Field(
        default_factory=list,
        description="Audiences a client's token must be valid for; empty: the API server's own.",
    )
    watch_inactivity_timeout: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a watch may send nothing, not even a bookmark, before it is reopened.",
    )
    watch_server_timeout: int = Field(
        default=300, ge=1, description="Seconds the API server keeps each watch open before it is renewed."
    )
    agentctl_host_override: str | None = Field(
        default=None, description="Reach every agentctl at this host instead of its pod IP (local testing)."
    )
    agentctl_port_override: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Reach every agentctl at this port instead of the session's (local testing).",
    )


def parse_args(argv: Sequence[str] | None = None) -> GatewayConfig:
    return load(GatewayConfig, argv)
