"""The AgentSession API: pydantic models (the source of truth) and the CRD generated from them."""

from agentsession.api.constants import API_VERSION, GROUP, KIND, PLURAL, SHORT_NAME, VERSION

__all__ = ["API_VERSION", "GROUP", "KIND", "PLURAL", "SHORT_NAME", "VERSION"]
