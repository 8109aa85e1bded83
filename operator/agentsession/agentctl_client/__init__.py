"""The one client of agentctl's API, shared by the operator and the gateway (its in-memory fake is in
`agentsession.testing`)."""

from agentsession.agentctl_client.client import (
    BAD_ANSWER,
    TOO_LARGE,
    UNREACHABLE,
    UPGRADE_REFUSED,
    AgentctlApi,
    AgentctlClient,
    AgentctlConnector,
    AgentctlError,
    CallObserver,
    ShellChannel,
    http_connector,
)

__all__ = [
    "BAD_ANSWER",
    "TOO_LARGE",
    "UNREACHABLE",
    "UPGRADE_REFUSED",
    "AgentctlApi",
    "AgentctlClient",
    "AgentctlConnector",
    "AgentctlError",
    "CallObserver",
    "ShellChannel",
    "http_connector",
]
