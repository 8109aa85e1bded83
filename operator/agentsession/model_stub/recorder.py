"""The log of what the stub received, served at `/requests` so tests can assert what reached the model.

A test of the operator checks, for instance, that an initial prompt reached the model exactly once across
restarts; only the model's side of the conversation can tell.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from aiohttp import web

from agentsession.model_stub.script import Exchange

Outcome = Literal["streaming", "completed", "disconnected"]


@dataclass(slots=True)
class Received:
    endpoint: str
    model: str
    kind: str
    """`prompt`, `tool_result` or `side` (a request the agent makes for itself)."""
    text: str
    """The latest text the user typed."""
    tool_result: bool
    prompts: list[str]
    """Every text the user typed in the conversation, oldest first."""
    stream: bool
    api_key: str = ""
    """The key the request carried (any provider's header, or Gemini's `key` parameter): what a proxy put in."""
    outcome: Outcome = "streaming"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def api_key_of(request: web.Request) -> str:
    bearer = request.headers.get("Authorization", "")
    return (
        request.headers.get("x-api-key")
        or request.headers.get("x-goog-api-key")
        or (bearer[7:] if bearer.lower().startswith("bearer ") else "")
        or request.query.get("key", "")
    )


class Recorder:
    def __init__(self) -> None:
        self._received: list[Received] = []

    def record(
        self, endpoint: str, model: str, exchange: Exchange, *, stream: bool, api_key: str = ""
    ) -> Received:
        entry = Received(
            endpoint=endpoint,
            model=model,
            kind=exchange.kind,
            text=exchange.prompt,
            tool_result=exchange.tool_result is not None,
            prompts=list(exchange.prompts),
            stream=stream,
            api_key=api_key,
        )
        self._received.append(entry)
        return entry

    def as_json(self) -> list[dict[str, Any]]:
        return [entry.as_json() for entry in self._received]

    def clear(self) -> None:
        self._received.clear()
