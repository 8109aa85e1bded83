"""Operator settings: `--flag` or `AGENTSESSION_*` environment variable (see `agentsession.settings`); the chart
sets the variables."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from kubernetes.utils.quantity import parse_quantity
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings

from agentsession.api.egress import HOST_PATTERN, Budget
from agentsession.api.models import CABundleSource, ObjectName
from agentsession.contract.wire import AGENTCTL_PORT
from agentsession.settings import LogFormat, LogLevel, StrList, settings_config

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
EPHEMERAL_STORAGE = "ephemeral-storage"


class _Settings(BaseModel):
    # The chart writes these as camelCase JSON, the way Helm values are spelled; Python code uses snake_case.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ModelWiring(_Settings):
    """How `spec.agent.model` reaches one agent: the variables or flags its documentation names.

    `{baseURL}` and `{name}` in `args` are replaced by the session's values."""

    base_url_env: str | None = Field(default=None, pattern=ENV_NAME)
    name_env: str | None = Field(default=None, pattern=ENV_NAME)
    args: list[str] = Field(default_factory=list)
    name_args: list[str] = Field(default_factory=list)


class AgentProfile(_Settings):
    """How a known agent type runs when the AgentSession does not say."""

    image: str | None = None
    command: list[str]
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Set in the agent container before the session's own env; values may use $(HOME).",
    )
    state_dirs: list[Annotated[str, StringConstraints(pattern=ENV_NAME)]] = Field(
        default_factory=list,
        description="Variables naming directories the agent needs to exist; made before it starts.",
    )
    model: ModelWiring | None = None


class AgentctlNetworkPolicy(_Settings):
    """The NetworkPolicy the operator keeps in each namespace where it runs session pods: agentctl's port admits
    only the operator's and the gateway's pods."""

    name: ObjectName = Field(description="Name of the NetworkPolicy in each namespace.")
    client_namespace: ObjectName = Field(description="Namespace of the operator's and the gateway's pods.")
    client_labels: dict[str, str] = Field(
        min_length=1,
        description="Labels the operator's and the gateway's pods carry (besides their component label).",
    )


class EgressProxy(_Settings):
    """The release's egress proxy, the session pods' only way out: the operator reads its Service's ClusterIP
    (session pods may have no cluster DNS to resolve a name) and points the agent's model, HTTP(S) and git traffic
    at it. The agent gets a phantom credential in place of the key, which only the proxy turns into the real one."""

    service_namespace: ObjectName = Field(description="Namespace of the proxy's Service (the release's).")
    service_name: ObjectName = Field(description="Name of the proxy's Service.")
    port: int = Field(default=8080, ge=1, le=65535, description="The Service's port the proxy serves on.")
    git_hosts: list[Annotated[str, StringConstraints(pattern=HOST_PATTERN)]] = Field(
        default_factory=list,
        description="Git hosts whose https:// URLs the agent's git (and the clone) sends through the proxy's git "
        "route, where the proxy adds the session's git token.",
    )


class Resources(BaseModel):
    requests: dict[str, str] = Field(default_factory=dict, description="Resource name to quantity.")
    limits: dict[str, str] = Field(default_factory=dict, description="Resource name to quantity.")


def _codex_provider(key: str, value: str) -> list[str]:
    return ["-c", f"model_providers.agentsession.{key}={value}"]


def _default_profiles() -> dict[str, AgentProfile]:
    """Images from `images/` (built by `make agent-images`); each agent's home and config directories live on
    the workspace volume, so they are writable under a read-only root and survive a suspend."""
    return {
        "demo": AgentProfile(command=["agentsession-demo-agent"]),
        "claude-code": AgentProfile(
            image="agentsession-claude-code:dev",
            command=["claude-agent-acp"],
            env={
                "CLAUDE_CONFIG_DIR": "$(HOME)/.claude",
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
            state_dirs=["CLAUDE_CONFIG_DIR"],
            model=ModelWiring(base_url_env="ANTHROPIC_BASE_URL", name_env="ANTHROPIC_MODEL"),
        ),
        "codex": AgentProfile(
            image="agentsession-codex:dev",
            command=["codex-acp"],
            # The pod is the sandbox (codex's own needs privileges a restricted pod lacks); "untrusted" still
            # asks the user, through a permission request, before any command that changes something.
            args=["-c", 'sandbox_mode="danger-full-access"', "-c", 'approval_policy="untrusted"'],
            env={"CODEX_HOME": "$(HOME)/.codex"},
            state_dirs=["CODEX_HOME"],
            # Codex takes another endpoint as a named provider; OPENAI_API_KEY (from the credentials Secret)
            # is its key, and the Responses API is what codex speaks.
            model=ModelWiring(
                args=[
                    "-c",
                    'model_provider="agentsession"',
                    *_codex_provider("name", '"agentsession"'),
                    *_codex_provider("base_url", '"{baseURL}"'),
                    *_codex_provider("env_key", '"OPENAI_API_KEY"'),
                    *_codex_provider("wire_api", '"responses"'),
                ],
                name_args=["-c", 'model="{name}"'],
            ),
        ),
        "gemini": AgentProfile(
            image="agentsession-gemini:dev",
            command=["gemini", "--experimental-acp"],
            model=ModelWiring(base_url_env="GOOGLE_GEMINI_BASE_URL", name_env="GEMINI_MODEL"),
        ),
    }


class OperatorConfig(BaseSettings):
    """Runs AgentSessions as pods."""

    model_config = settings_config("agentsession-operator", "AGENTSESSION_", env_nested_delimiter="__")

    namespaces: StrList = Field(
        default_factory=list,
        description="Namespaces (or glob patterns) to watch; empty means the whole cluster.",
    )
    image: str = Field(
        default="agentsession:dev", description="The project image: agentctl and the demo agent."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent",
        description="Pull policy of the session pod's images, unless the session sets the agent's.",
    )
    agentctl_port: int = Field(
        default=AGENTCTL_PORT, ge=1, le=65535, description="Port agentctl serves on in each session pod."
    )
    agent_profiles: dict[str, AgentProfile] = Field(
        default_factory=_default_profiles,
        description="Per agent type, fields that replace the built-in profile's (e.g. only `image`); "
        "a type with no built-in profile must give at least `command`.",
    )
    # The kubelet evicts a pod whose emptyDirs and logs pass the sum of its containers' ephemeral-storage limits,
    # so the agent's limit leaves room for a full scratch workspace (workspace_size_limit) and its /tmp.
    agentctl_resources: Resources = Field(
        default=Resources(
            requests={"cpu": "50m", "memory": "64Mi", EPHEMERAL_STORAGE: "64Mi"},
            limits={"cpu": "1", "memory": "256Mi", EPHEMERAL_STORAGE: "1Gi"},
        ),
        description="Requests and limits of agentctl and of the pod's init containers (workspace layout, clone), "
        "unless the session sets agentctl's; ephemeral-storage always has one.",
    )
    agent_resources: Resources = Field(
        default=Resources(
            requests={"cpu": "100m", "memory": "128Mi", EPHEMERAL_STORAGE: "256Mi"},
            limits={"cpu": "2", "memory": "2Gi", EPHEMERAL_STORAGE: "12Gi"},
        ),
        description="Requests and limits of the agent container, unless the session sets them; "
        "ephemeral-storage always has one.",
    )
    workspace_size_limit: str = Field(
        default="10Gi",
        description="Size limit of a scratch (emptyDir) workspace: the kubelet evicts the pod whose workspace "
        "grows past it. A persistent workspace has its claim's size.",
    )
    git_image: str = Field(
        default="alpine/git:2.47.2", description="Image of the init container that clones."
    )
    ca_bundle: CABundleSource | None = Field(
        default=None,
        description="A ConfigMap (in each session's namespace) of CA certificates every agent trusts, "
        "unless the session names its own.",
    )
    run_as_user: int = Field(
        default=65532,
        ge=1,
        description="User id of the agent (and of the clone), and the group id of the pod's containers and "
        "volumes, which the agent and agentctl share.",
    )
    agentctl_run_as_user: int = Field(
        default=65533,
        ge=1,
        description="User id of agentctl and its terminal; not run_as_user, so the agent cannot reach "
        "agentctl's journal or the terminal's HOME.",
    )
    agentctl_images: StrList = Field(
        default_factory=list,
        description="Images a session may name in spec.agentctl.image besides `image`; empty: none, a session "
        "asking for another agentctl image is refused.",
    )
    start_timeout_seconds: float = Field(
        default=60.0, gt=0, description="Seconds each request to agentctl may take."
    )
    start_retry_seconds: float = Field(
        default=5.0, gt=0, description="Seconds before an agent start that failed is tried again."
    )
    agentctl_host_override: str | None = Field(
        default=None,
        description="Reach every agentctl at this host instead of the pod IP (for local testing).",
    )
    agentctl_network_policy: AgentctlNetworkPolicy | None = Field(
        default=None,
        description="Keep this NetworkPolicy in every namespace with session pods, so that only the operator "
        "and the gateway reach agentctl; unset: none (the chart sets it unless networkPolicy.enabled is false).",
    )
    agentctl_key_file: Path | None = Field(
        default=None,
        description="File holding the release key each agentctl's token is derived from (the gateway reads "
        "the same one); required. The chart mounts its Secret `<release>-agentctl-key` there.",
    )
    egress_proxy: EgressProxy | None = Field(
        default=None,
        description="Send every session pod's traffic through this egress proxy (JSON, e.g. "
        '{"serviceNamespace": "agentsession", "serviceName": "agentsession-egress-proxy", "port": 8080, '
        '"gitHosts": ["github.com"]}); unset: the agent gets the credentials Secret as env and the network as '
        "the cluster gives it.",
    )
    default_budget: Budget = Field(
        default_factory=Budget,
        description="Each session's model budget (JSON of spec.budget) for the limits neither the session nor "
        "its namespace's annotation agentsession.dev/budget sets; empty: no limit.",
    )
    metrics_port: int = Field(
        default=8080, ge=0, le=65535, description="Port of the Prometheus `/metrics` endpoint; 0 disables it."
    )
    metrics_host: str = Field(default="0.0.0.0", description="Address of the metrics server.")
    liveness_port: int = Field(
        default=8081, ge=0, le=65535, description="Port of the liveness endpoint `/healthz`; 0 disables it."
    )
    liveness_host: str = Field(default="0.0.0.0", description="Address of the liveness endpoint.")
    max_concurrent_reconciles: int = Field(
        default=32, ge=1, le=1000, description="Sessions reconciled at the same time; more wait their turn."
    )
    watch_stall_seconds: float = Field(
        default=120.0, gt=0, description="Liveness fails when the watch has missed changes this long."
    )
    leader_election: bool = Field(
        default=False,
        description="Act only while holding a Lease, so several replicas can run and one of them acts.",
    )
    leader_election_namespace: ObjectName | None = Field(
        default=None,
        description="Namespace of the Lease; unset: the operator's own (its service account's, in a pod).",
    )
    leader_election_lease_name: ObjectName = Field(
        default="agentsession-operator", description="Name of the Lease."
    )
    leader_election_lease_duration_seconds: int = Field(
        default=15,
        ge=2,
        le=3600,
        description="Seconds a standby waits, from the last renewal it saw, before it takes the Lease over.",
    )
    leader_election_renew_deadline_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Seconds the leader may fail to renew before it stops acting (exits); below the duration.",
    )
    leader_election_retry_period_seconds: float = Field(
        default=2.0,
        gt=0,
        description="Seconds between renewals, and between a standby's tries to take the Lease.",
    )
    log_format: LogFormat = Field(default="text", description="`text` or `json` (one object per line).")
    log_level: LogLevel = Field(default="INFO", description="Least severe level logged.")
    verbose: bool = Field(
        default=False,
        description="Log at DEBUG, kopf's report of every handler included; wins over log_level.",
    )

    @field_validator("agent_profiles", mode="before")
    @classmethod
    def _over_the_defaults(cls, given: Any) -> Any:
        if not isinstance(given, dict):
            return given
        merged: dict[str, Any] = {
            kind: profile.model_dump(by_alias=True) for kind, profile in _default_profiles().items()
        }
        for kind, override in given.items():
            fields = override.model_dump(by_alias=True) if isinstance(override, AgentProfile) else override
            base = merged.get(kind, {})
            if isinstance(fields, dict):
                # env merges by name, so adding one variable keeps the ones the agent needs (e.g. CODEX_HOME).
                env = {**base.get("env", {}), **(fields.get("env") or {})}
                merged[kind] = {**base, **fields, "env": env}
            else:
                merged[kind] = fields
        return merged

    @field_validator("workspace_size_limit")
    @classmethod
    def _a_positive_quantity(cls, given: str) -> str:
        try:
            size: Decimal = parse_quantity(given)  # type: ignore[no-untyped-call]
        except ValueError:
            raise ValueError(f"{given!r} is not a quantity (e.g. 10Gi)") from None
        if size <= 0:
            raise ValueError(f"{given!r} is not a positive size")
        return given

    @model_validator(mode="after")
    def _agentctl_apart(self) -> OperatorConfig:
        if self.agentctl_run_as_user == self.run_as_user:
            raise ValueError(
                f"agentctl_run_as_user must differ from run_as_user ({self.run_as_user}): with one uid the "
                "agent could rewrite agentctl's journal and the terminal's HOME"
            )
        return self

    @model_validator(mode="after")
    def _election_fits(self) -> OperatorConfig:
        if not self.leader_election:
            return self
        # As client-go requires: the leader gives up before a standby may take over, and retries in between.
        if not (
            self.leader_election_retry_period_seconds
            < self.leader_election_renew_deadline_seconds
            < self.leader_election_lease_duration_seconds
        ):
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.leader_election_retry_period_seconds:g} s, "
                f"{self.leader_election_renew_deadline_seconds:g} s, "
                f"{self.leader_election_lease_duration_seconds} s"
            )
        return self

    @property
    def watches_fixed_namespaces(self) -> bool:
        """True when the operator serves named namespaces only (no cluster-wide watch, no glob patterns)."""
        return bool(self.namespaces) and not any(ch in ns for ns in self.namespaces for ch in "*?[")
