"""The AgentSession operator: pure builders and mappers at the core, thin kopf handlers around them."""
