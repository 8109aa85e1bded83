"""The WebSocket gateway: AgentSession readiness, lazy initialization, history and live updates for UIs."""
