"""Settings and resolved configuration of agentctl."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings

from agentsession.api.constants import DEFAULT_DRAIN_SECONDS
from agentsession.contract.wire import AGENTCTL_PORT, TOKEN_ENV
from agentsession.settings import LogFormat, LogLevel, load, settings_config

DEFAULT_AGENT_COMMAND = "agentsession-demo-agent"


def _default_agent_command() -> tuple[str, ...]:
    # The demo agent from this same installation, whether or not its console script is on PATH.
    return (sys.executable, "-m", "agentsession.demo_agent")


MAX_BODY_BYTES = 1024 * 1024

# agentctl's own settings, its token among them, are its AGENTCTL_* variables. The processes agentctl
# starts (the agent, the workspace shell) run code agentctl does not control and must not act as its clients.
AGENTCTL_ENV_PREFIX = "AGENTCTL_"


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != TOKEN_ENV and not k.startswith(AGENTCTL_ENV_PREFIX)}


class ConfigError(Exception):
    """A setting that makes agentctl unable to start; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Config:
    host: str
    port: int
    workdir: Path
    state_dir: Path
    agent_command: tuple[str, ...]
    agent_fifo_dir: Path | None
    token: str | None
    permission_timeout: float
    attach_timeout: float
    drain_timeout: float
    max_body_bytes: int
    shell_command: tuple[str, ...]
    log_format: str
    log_level: str
    child_env: dict[str, str]
    shell_umask: int | None = None

    @property
    def transport_name(self) -> str:
        return "fifo" if self.agent_fifo_dir is not None else "subprocess"

    @property
    def journal_path(self) -> Path:
        return self.state_dir / "history.jsonl"

    @property
    def session_state_path(self) -> Path:
        return self.state_dir / "state.json"


class AgentctlSettings(BaseSettings):
    """Control plane sidecar for one ACP agent."""

    model_config = settings_config("agentctl", AGENTCTL_ENV_PREFIX)

    host: str = Field(default="0.0.0.0", description="Address to listen on (all interfaces, for a pod).")
    port: int = Field(default=AGENTCTL_PORT, ge=1, le=65535, description="Port to listen on.")
    workdir: Path = Field(default=Path("."), description="The workspace: the agent's working directory.")
    state_dir: Path | None = Field(
        default=None,
        description="Where the journal and session state live, made private to agentctl's user; unset: "
        "WORKDIR/.agentctl. In a pod, on storage the agent's container does not mount.",
    )
    agent_command: str | None = Field(
        default=None,
        description="Spawn this agent as a subprocess, a shell-quoted command line; "
        f"unset: {DEFAULT_AGENT_COMMAND} from this installation.",
    )
    agent_fifo_dir: Path | None = Field(
        default=None,
        description="Talk to an agent in another container through DIR/agent.in and DIR/agent.out "
        "instead of spawning one.",
    )
    token: SecretStr | None = Field(
        default=None,
        description="Token every client signs its requests with (never sent); the variable or token_file "
        "keeps it out of the process list.",
    )
    token_file: Path | None = Field(default=None, description="File holding the token; wins over token.")
    auth: bool = Field(
        default=True,
        description="Require signed requests; --no-auth serves without them (local development only).",
    )
    permission_timeout: float = Field(
        default=300.0, description="Seconds a permission request waits for an answer before it is cancelled."
    )
    attach_timeout: float = Field(default=60.0, description="Seconds /start waits for the agent.")
    drain_timeout: float = Field(
        default=float(DEFAULT_DRAIN_SECONDS),
        ge=0,
        le=3600,
        description="When the agent container is stopped: seconds a running turn may finish before it is "
        "cancelled.",
    )
    max_body_bytes: int = Field(default=MAX_BODY_BYTES, description="Largest request body accepted.")
    shell: str | None = Field(
        default=None, description="Shell command of the terminal (PTY); unset: $SHELL -l, else bash or sh -l."
    )
    shell_umask: str | None = Field(
        default=None,
        pattern=r"^0?[0-7]{3}$",
        description="File mode creation mask of the terminal, in octal (002: what it writes, the agent in its "
        "group may edit); unset: agentctl's own.",
    )
    log_format: LogFormat = Field(default="text", description="`text` or `json` (one object per line).")
    log_level: LogLevel = Field(default="INFO", description="Least severe level logged.")

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if self.agent_command is not None and self.agent_fifo_dir is not None:
            raise ValueError("agent_command and agent_fifo_dir exclude each other: the agent runs one way")
        return self


def _default_shell() -> tuple[str, ...]:
    shell = os.environ.get("SHELL") or ("/bin/bash" if Path("/bin/bash").exists() else "/bin/sh")
    return (shell, "-l")


def _read_token(settings: AgentctlSettings) -> str | None:
    if settings.token_file is not None:
        try:
            token = settings.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read --token-file {settings.token_file}: {exc.strerror}") from exc
    else:
        token = settings.token.get_secret_value().strip() if settings.token else ""
    if token:
        return token
    if not settings.auth:
        return None
    raise ConfigError(f"no token: set ${TOKEN_ENV} or --token-file (or pass --no-auth for local use)")


def parse_config(argv: Sequence[str] | None = None) -> Config:
    """agentctl's configuration from its flags and `AGENTCTL_*` variables; a bad setting exits with status 2."""
    settings = load(AgentctlSettings, argv)
    workdir = settings.workdir.resolve()
    if not workdir.is_dir():
        raise ConfigError(f"--workdir {workdir} is not a directory")
    agent_command = (
        tuple(shlex.split(settings.agent_command))
        if settings.agent_command is not None
        else _default_agent_command()
    )
    if settings.agent_fifo_dir is None and not agent_command:
        raise ConfigError("--agent-command is empty")
    return Config(
        host=settings.host,
        port=settings.port,
        workdir=workdir,
        state_dir=(settings.state_dir or workdir / ".agentctl").resolve(),
        agent_command=agent_command,
        agent_fifo_dir=settings.agent_fifo_dir.resolve() if settings.agent_fifo_dir else None,
        token=_read_token(settings),
        permission_timeout=max(0.1, settings.permission_timeout),
        attach_timeout=max(0.1, settings.attach_timeout),
        drain_timeout=settings.drain_timeout,
        max_body_bytes=max(1024, settings.max_body_bytes),
        shell_command=tuple(shlex.split(settings.shell)) if settings.shell else _default_shell(),
        shell_umask=int(settings.shell_umask, 8) if settings.shell_umask is not None else None,
        log_format=settings.log_format,
        log_level=settings.log_level,
        child_env=child_environment(os.environ),
    )
