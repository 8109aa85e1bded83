"""The parts of agentctl's ACP bridge, each with one job; `agentctl.acp_bridge.AgentBridge` is the small front
that builds them, wires them together and offers them to the routes.

- `phases`: where the bridge is with its agent, one `Phase` moved along `TRANSITIONS` (pure).
- `acp_state`: what the agent said of itself and of its session: identity, capabilities, modes (pure).
- `agent_errors`: the agent's last error for `GET /api/v1/status`, each one journaled and counted.
- `intake`: the agent's messages as they arrive: each session/update journaled in order, refused lines reported.
  A new session/update kind (usage updates, ...) is read here; what it changes of the agent's live state, which
  the gateway shows too, is reduced in `contract.live_state`.
- `agent_requests`: the `acp.Client` agentctl offers, what the agent may ask of agentctl: permissions now;
  elicitation, terminals and the file system get their handlers here (and their capability in
  `acp_session.CLIENT_CAPABILITIES`).
- `attachment`: the pipes, channel and ACP connection of one agent, and how they end.
- `acp_session`: agentctl's calls to the agent (timeouts, the authentication retry), initialize, session/new,
  session/load and modes. MCP servers handed to the agent go into its session/new and session/load here.
- `turns`: prompt turns and their cancel.
- `lifecycle`: the orchestration: start (attach, initialize, resume), stop, preparing a pod's agent before anyone
  asks, attaching again after the agent's exit, with one retry loop for both.
"""

import logging

# One logger for the bridge's parts, under the name its lines have always had.
log = logging.getLogger("agentsession.agentctl.acp_bridge")
