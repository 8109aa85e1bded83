"""Refusals as the caller reads them: in the model provider's own error shape, so the agent shows the message to
its user, or as text for the forward proxy and git, where curl, git and package managers print the body."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentsession.egress_proxy.identity import Refusal

# Gemini's error names the gRPC status of the HTTP status.
_GRPC_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                413: "INVALID_ARGUMENT", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}  # fmt: skip


def provider_body(provider: str, refusal: Refusal) -> dict[str, Any]:
    if provider == "anthropic":
        return {"type": "error", "error": {"type": refusal.type, "message": refusal.message}}
    if provider == "openai":
        return {
            "error": {"message": refusal.message, "type": refusal.type, "code": refusal.type, "param": None}
        }
    return {
        "error": {
            "code": refusal.status,
            "message": refusal.message,
            "status": _GRPC_STATUS.get(refusal.status, "UNKNOWN"),
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": refusal.type,
                    "domain": "agentsession.dev",
                }
            ],
        }
    }


def provider_error(provider: str, refusal: Refusal) -> web.Response:
    return web.json_response(provider_body(provider, refusal), status=refusal.status)


def text_error(refusal: Refusal) -> web.Response:
    return web.Response(
        status=refusal.status, text=f"{refusal.message}\n", headers={"X-Egress-Refusal": refusal.type}
    )


def text_head(refusal: Refusal) -> bytes:
    """A whole HTTP/1.1 answer for the CONNECT listener, which writes bytes itself."""
    body = f"{refusal.message}\n".encode()
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 504: "Gateway Timeout"}.get(
        refusal.status, "Error"
    )
    head = (
        f"HTTP/1.1 {refusal.status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nX-Egress-Refusal: {refusal.type}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
