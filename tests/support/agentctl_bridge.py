"""An agentctl's bridge in a unit test: the services of an agentctl that never starts its agent (`false`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentsession.agentctl.acp_bridge import AgentBridge
from agentsession.agentctl.config import Config
from agentsession.agentctl.services import Services


@contextmanager
def unit_bridge(tmp_path: Path, attach_timeout: float = 1.0) -> Iterator[AgentBridge]:
    config = Config(
        host="127.0.0.1",
        port=0,
        workdir=tmp_path,
        state_dir=tmp_path / ".agentctl",
        agent_command=("false",),
        agent_fifo_dir=None,
        token=None,
        permission_timeout=1.0,
        attach_timeout=attach_timeout,
        drain_timeout=1.0,
        max_body_bytes=1024,
        shell_command=("false",),
        log_format="text",
        log_level="INFO",
        child_env={},
    )
    services = Services.build(config)
    try:
        yield services.bridge
    finally:
        services.journal.close()
