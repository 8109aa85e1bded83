"""Command line and settings of agentctl."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentsession.agentctl_api import AGENTCTL_PORT, TOKEN_ENV

DEFAULT_AGENT_COMMAND = "agentsession-demo-agent"


def _default_agent_command() -> tuple[str, ...]:
    # The demo agent from this same installation, whether or not its console script is on PATH.
    return (sys.executable, "-m", "agentsession.demo_agent")


MAX_BODY_BYTES = 1024 * 1024

# agentctl's own settings: the bearer token and anything named like it. The processes agentctl starts (the agent,
# the workspace shell) run code agentctl does not control and must not be able to act as agentctl's clients.
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
    max_body_bytes: int
    shell_command: tuple[str, ...]
    log_format: str
    log_level: str
    child_env: dict[str, str]

    @property
    def transport_name(self) -> str:
        return "fifo" if self.agent_fifo_dir is not None else "subprocess"

    @property
    def journal_path(self) -> Path:
        return self.state_dir / "history.jsonl"

    @property
    def session_state_path(self) -> Path:
        return self.state_dir / "state.json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentctl", description="Control plane sidecar for one ACP agent.")
    p.add_argument("--host", default="0.0.0.0", help="address to bind (default: all interfaces, for a pod)")
    p.add_argument("--port", type=int, default=AGENTCTL_PORT)
    p.add_argument("--workdir", type=Path, default=Path.cwd(), help="the workspace; the journal lives here")
    p.add_argument("--state-dir", type=Path, default=None, help="default: WORKDIR/.agentctl")
    transport = p.add_mutually_exclusive_group()
    transport.add_argument(
        "--agent-command",
        default=None,
        help=f"spawn this agent as a subprocess (default: {DEFAULT_AGENT_COMMAND!r})",
    )
    transport.add_argument(
        "--agent-fifo-dir",
        type=Path,
        default=None,
        help="talk to an agent in another container through DIR/agent.in and DIR/agent.out",
    )
    p.add_argument("--token-file", type=Path, default=None, help=f"bearer token file (else ${TOKEN_ENV})")
    p.add_argument(
        "--no-auth", action="store_true", help="serve without a bearer token (local development only)"
    )
    p.add_argument("--permission-timeout", type=float, default=300.0, help="seconds before cancelled")
    p.add_argument("--attach-timeout", type=float, default=60.0, help="seconds /start waits for the agent")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES)
    p.add_argument("--shell", default=None, help="shell command for the PTY (default: $SHELL -l or sh -l)")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", default="INFO")
    return p


def _default_shell() -> tuple[str, ...]:
    shell = os.environ.get("SHELL") or ("/bin/bash" if Path("/bin/bash").exists() else "/bin/sh")
    return (shell, "-l")


def _read_token(args: argparse.Namespace, env: dict[str, str]) -> str | None:
    if args.token_file is not None:
        try:
            token: str = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read --token-file {args.token_file}: {exc.strerror}") from exc
    else:
        token = str(env.get(TOKEN_ENV, "")).strip()
    if token:
        return token
    if args.no_auth:
        return None
    raise ConfigError(f"no bearer token: set ${TOKEN_ENV} or --token-file (or pass --no-auth for local use)")


def parse_config(argv: list[str] | None = None, env: dict[str, str] | None = None) -> Config:
    args = _parser().parse_args(argv)
    env = dict(os.environ) if env is None else env
    workdir = args.workdir.resolve()
    if not workdir.is_dir():
        raise ConfigError(f"--workdir {workdir} is not a directory")
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port} is out of range")
    agent_command = (
        tuple(shlex.split(args.agent_command)) if args.agent_command is not None else _default_agent_command()
    )
    if args.agent_fifo_dir is None and not agent_command:
        raise ConfigError("--agent-command is empty")
    return Config(
        host=args.host,
        port=args.port,
        workdir=workdir,
        state_dir=(args.state_dir or workdir / ".agentctl").resolve(),
        agent_command=agent_command,
        agent_fifo_dir=args.agent_fifo_dir.resolve() if args.agent_fifo_dir else None,
        token=_read_token(args, env),
        permission_timeout=max(0.1, args.permission_timeout),
        attach_timeout=max(0.1, args.attach_timeout),
        max_body_bytes=max(1024, args.max_body_bytes),
        shell_command=tuple(shlex.split(args.shell)) if args.shell else _default_shell(),
        log_format=args.log_format,
        log_level=args.log_level.upper(),
        child_env=child_environment(env),
    )
