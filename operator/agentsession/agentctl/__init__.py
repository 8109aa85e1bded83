"""agentctl: the sidecar that controls one ACP agent (HTTP/WS API, ACP bridge, journal, shell)."""

__version__ = "0.1.0"
