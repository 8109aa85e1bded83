"""AgentSession: run ACP coding agents on Kubernetes."""

__version__ = "0.1.0"
