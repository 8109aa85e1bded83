"""The one error type of the HTTP API; the middleware turns it into an ErrorResponse body."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentsession.agentctl.agent_input import REFUSED_ANSWER

# An agent's error message and data are its own strings: what of them goes into an answer and into last_error.
AGENT_TEXT_MAX_CHARS = 2000

if TYPE_CHECKING:
    # Only for the annotation: agentctl answers its probes before the ACP library is loaded.
    from acp import RequestError


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def conflict(message: str) -> ApiError:
    return ApiError(409, "conflict", message)


def agent_unavailable(message: str) -> ApiError:
    return ApiError(503, "agent_unavailable", message)


def from_agent_error(method: str, exc: RequestError) -> ApiError:
    """Map a JSON-RPC error from the agent: its complaints about our input are the caller's 4xx."""
    code = getattr(exc, "code", -32603)
    data = getattr(exc, "data", None)
    if code == REFUSED_ANSWER:
        return ApiError(
            502,
            "agent_protocol",
            f"agentctl refused the agent's answer to {method}: {exc}",
            agent_error_code=code,
        )
    text = f"agent rejected {method}: {exc}" + (f" ({data})" if data else "")
    if len(text) > AGENT_TEXT_MAX_CHARS:
        text = text[:AGENT_TEXT_MAX_CHARS] + "..."
    if code in (-32602, -32600):
        return ApiError(400, "agent_rejected", text, agent_error_code=code)
    if code == -32002:
        return ApiError(404, "not_found", text, agent_error_code=code)
    if code == -32601:
        return ApiError(501, "agent_unsupported", f"agent does not implement {method}", agent_error_code=code)
    return ApiError(502, "agent_error", text, agent_error_code=code)
