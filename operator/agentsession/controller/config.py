"""Operator settings, read from `AGENTSESSION_*` environment variables (the Helm chart sets them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentsession.agentctl_api import AGENTCTL_PORT


class AgentProfile(BaseModel):
    """How a known agent type runs when the AgentSession does not say."""

    image: str | None = None
    command: list[str]
    args: list[str] = Field(default_factory=list)


class Resources(BaseModel):
    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)


def _default_profiles() -> dict[str, AgentProfile]:
    # Known agents need an image that carries them; the operator's image carries only the demo agent.
    return {
        "demo": AgentProfile(command=["agentsession-demo-agent"]),
        "claude-code": AgentProfile(command=["claude-code-acp"]),
        "codex": AgentProfile(command=["codex-acp"]),
        "gemini": AgentProfile(command=["gemini", "--experimental-acp"]),
    }


class OperatorConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTSESSION_", env_nested_delimiter="__")

    namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces (or glob patterns) to watch; empty means the whole cluster.",
    )
    image: str = Field(
        default="agentsession:dev", description="The project image: agentctl and the demo agent."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    agentctl_port: int = Field(default=AGENTCTL_PORT, ge=1, le=65535)
    agent_profiles: dict[str, AgentProfile] = Field(default_factory=_default_profiles)
    agentctl_resources: Resources = Field(
        default_factory=lambda: Resources(
            requests={"cpu": "50m", "memory": "64Mi"}, limits={"cpu": "500m", "memory": "256Mi"}
        )
    )
    agent_resources: Resources = Field(
        default_factory=lambda: Resources(
            requests={"cpu": "100m", "memory": "128Mi"}, limits={"cpu": "2", "memory": "2Gi"}
        )
    )
    git_image: str = Field(
        default="alpine/git:2.47.2", description="Image of the init container that clones."
    )
    run_as_user: int = Field(default=65532, ge=1)
    start_timeout_seconds: float = Field(default=60.0, gt=0)
    start_retry_seconds: float = Field(default=5.0, gt=0)
    agentctl_host_override: str | None = Field(
        default=None,
        description="Reach every agentctl at this host instead of the pod IP (for local testing).",
    )
    metrics_port: int = Field(default=8080, ge=0, le=65535, description="0 disables the metrics server.")
    metrics_host: str = "0.0.0.0"
    watch_stall_seconds: float = Field(default=120.0, gt=0)
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"

    @property
    def watches_fixed_namespaces(self) -> bool:
        """True when the operator serves named namespaces only (no cluster-wide watch, no glob patterns)."""
        return bool(self.namespaces) and not any(ch in ns for ns in self.namespaces for ch in "*?[")
