"""A deterministic ACP agent for demos and tests: no model, no network, no key."""
