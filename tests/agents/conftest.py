"""Real agents (Claude Code, Codex, Gemini CLI through their ACP adapters) driven by real agentctl, on loopback.

The adapters are npm packages, found in `$AGENTSESSION_AGENTS_NPM_DIR/node_modules/.bin`. Without them the tests
skip with the reason; with `AGENTSESSION_REQUIRE_AGENTS=1` they fail instead. The agents talk only to the model
stub on 127.0.0.1, through the same settings the operator's agent profiles use.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.component.conftest import Agentctl, free_port, launch
from tests.support.model_stub import ModelStub, model_stub

NPM_DIR_ENV = "AGENTSESSION_AGENTS_NPM_DIR"
REQUIRE_ENV = "AGENTSESSION_REQUIRE_AGENTS"
AGENT_WAIT = 90.0


@dataclass(frozen=True)
class AgentProfile:
    """How one agent is started against the model stub: its program, arguments and whole environment."""

    name: str
    program: str
    args: tuple[str, ...] = ()

    def environment(self, stub_url: str, home: Path) -> dict[str, str]:
        # The agent gets only these variables: an inherited IS_SANDBOX makes Claude Code refuse session/new.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
        if self.name == "claude":
            env |= {
                "ANTHROPIC_BASE_URL": stub_url,
                "ANTHROPIC_API_KEY": "stub-key",
                "CLAUDE_CONFIG_DIR": str(home / ".claude"),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
            }
        elif self.name == "codex":
            env |= {"CODEX_HOME": str(home / ".codex"), "STUB_API_KEY": "stub-key"}
        elif self.name == "gemini":
            env |= {"GOOGLE_GEMINI_BASE_URL": stub_url, "GEMINI_API_KEY": "stub-key"}
        return env

    def arguments(self, stub_url: str) -> tuple[str, ...]:
        if self.name != "codex":
            return self.args
        settings = [
            'model_provider="stub"',
            'model_providers.stub.name="stub"',
            f'model_providers.stub.base_url="{stub_url}/v1"',
            'model_providers.stub.env_key="STUB_API_KEY"',
            'model_providers.stub.wire_api="responses"',
            # The pod is the sandbox; "untrusted" still asks before any command that changes something.
            'sandbox_mode="danger-full-access"',
            'approval_policy="untrusted"',
        ]
        return tuple(arg for s in settings for arg in ("-c", s))

    def command(self, bin_dir: Path, stub_url: str, home: Path) -> str:
        for directory in (home, home / ".claude", home / ".codex"):
            directory.mkdir(parents=True, exist_ok=True)
        env = [f"{k}={v}" for k, v in self.environment(stub_url, home).items()]
        program = str(bin_dir / self.program)
        return shlex.join(["env", "-i", *env, program, *self.arguments(stub_url)])


PROFILES = {
    "claude": AgentProfile("claude", "claude-agent-acp"),
    "codex": AgentProfile("codex", "codex-acp"),
    "gemini": AgentProfile("gemini", "gemini", ("--experimental-acp",)),
}


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def adapter_bin(program: str) -> Path:
    """The npm bin directory holding `program`, or a skip (a failure where agents are required)."""
    root = os.environ.get(NPM_DIR_ENV, "").strip()
    reason = (
        f"${NPM_DIR_ENV} is not set"
        if not root
        else f"{program} is not installed in ${NPM_DIR_ENV}/node_modules/.bin ({root})"
    )
    bin_dir = Path(root) / "node_modules" / ".bin"
    if root and os.access(bin_dir / program, os.X_OK):
        return bin_dir
    if _truthy(REQUIRE_ENV):
        pytest.fail(f"{reason} (required because {REQUIRE_ENV} is set)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=AGENT_WAIT)) as session:
        yield session


@dataclass
class LocalAgent:
    """One agent under agentctl, restartable on the same workspace."""

    profile: AgentProfile
    command: str
    workdir: Path
    http: aiohttp.ClientSession
    stub: ModelStub
    ctl: Agentctl | None = None

    async def start_agentctl(self) -> Agentctl:
        self.ctl = await launch(
            self.workdir,
            self.http,
            "--agent-command",
            self.command,
            "--permission-timeout",
            "60",
            "--attach-timeout",
            str(AGENT_WAIT),
        )
        return self.ctl

    async def stop_agentctl(self) -> None:
        if self.ctl is not None:
            await self.ctl.stop()
            self.ctl = None


@pytest.fixture
async def local_agent(
    request: pytest.FixtureRequest, tmp_path: Path, workdir: Path, http: aiohttp.ClientSession
) -> AsyncIterator[LocalAgent]:
    """agentctl running the agent named by the test's parameter (`indirect=True`), with its own model stub."""
    profile = PROFILES[request.param]
    bin_dir = adapter_bin(profile.program)
    async with model_stub(free_port(), tmp_path / "model-stub.log", http) as stub:
        command = profile.command(bin_dir, stub.url, tmp_path / "home")
        agent = LocalAgent(profile, command, workdir, http, stub)
        await agent.start_agentctl()
        yield agent
        await agent.stop_agentctl()


@pytest.fixture
def stub(local_agent: LocalAgent) -> ModelStub:
    return local_agent.stub
