"""What the operator, the gateway and agentctl agree on: agentctl's routes, their wire bodies, how a client proves
it holds agentctl's token, and how ACP updates become an agent's live state."""
