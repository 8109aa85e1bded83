"""The Anthropic Messages API (`POST /v1/messages`, streaming or not, and `count_tokens`) as Claude Code calls it.

Claude Code puts `<system-reminder>` and other tagged blocks (and `[Request interrupted by user]` after a cancel)
next to what the user typed, so the prompt is the last untagged text block of the last user message that has
one. Its environment section names the working directory (`Primary working directory: /path`), which the
`Write` tool needs as an absolute path. Requests without tools are its side requests (titles, quota probes).
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from agentsession.model_stub.ids import stable_id
from agentsession.model_stub.recorder import Recorder, api_key_of
from agentsession.model_stub.script import Exchange, Reply, ToolResult, reply_to
from agentsession.model_stub.sse import Event, answer

ENDPOINT = "anthropic.messages"
WRITE_TOOL = "Write"
_WORKDIR = re.compile(r"(?:Primary working directory|Working directory|<cwd>):?\s*([^\s<]+)")


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text_of(content: Any) -> str:
    return "".join(b.get("text", "") for b in _blocks(content) if b.get("type") == "text")


def _typed_text(message: dict[str, Any]) -> str | None:
    texts = [
        str(b.get("text", ""))
        for b in _blocks(message.get("content"))
        if b.get("type") == "text" and not str(b.get("text", "")).lstrip().startswith(("<", "["))
    ]
    return texts[-1].strip() if texts else None


def exchange_of(body: dict[str, Any]) -> Exchange:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    user = [m for m in messages if m.get("role") == "user"]
    prompts = tuple(t for m in user if (t := _typed_text(m)) is not None)
    tool_result = None
    if messages and messages[-1].get("role") == "user":
        results = [b for b in _blocks(messages[-1].get("content")) if b.get("type") == "tool_result"]
        if results:
            tool_result = ToolResult(
                text="\n".join(_text_of(b.get("content")) for b in results),
                is_error=any(bool(b.get("is_error")) for b in results),
            )
    match = _WORKDIR.search(_text_of(body.get("system")) or "")
    return Exchange(
        prompt=prompts[-1] if prompts else "",
        prompts=prompts,
        tool_result=tool_result,
        workdir=match.group(1) if match else None,
        side=not body.get("tools"),
    )


class _Message:
    """One assistant message of the reply: its content blocks, as stream events or as a whole."""

    def __init__(self, body: dict[str, Any], exchange: Exchange, reply: Reply) -> None:
        turn = len(body.get("messages") or [])
        self.id = stable_id("msg_stub_", turn, exchange.prompt, exchange.kind)
        self.model = str(body.get("model", ""))
        self.reply = reply
        self.tool_use: dict[str, Any] | None = None
        tools = {str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)}
        if reply.write is not None and WRITE_TOOL in tools and exchange.workdir:
            self.tool_use = {
                "type": "tool_use",
                "id": stable_id("toolu_stub_", turn, exchange.prompt),
                "name": WRITE_TOOL,
                "input": {"file_path": reply.write.path_in(exchange.workdir), "content": reply.write.content},
            }
        elif reply.write is not None:
            self.reply = Reply(
                (f"Cannot write {reply.write.name}: no {WRITE_TOOL} tool or working directory.",)
            )

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tool_use else "end_turn"

    def usage(self) -> dict[str, int]:
        return {
            "input_tokens": 10,
            "output_tokens": max(1, len(self.reply.text) // 4),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }

    def whole(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": self.reply.text}]
        if self.tool_use:
            content.append(self.tool_use)
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop_reason,
            "stop_sequence": None,
            "usage": self.usage(),
        }

    def opening(self) -> list[Event]:
        start = {**self.whole(), "content": [], "stop_reason": None}
        return [
            ("message_start", {"type": "message_start", "message": start}),
            ("content_block_start", _block_start(0, {"type": "text", "text": ""})),
            ("ping", {"type": "ping"}),
        ]

    def text(self, chunk: str) -> list[Event]:
        delta = {"type": "text_delta", "text": chunk}
        return [("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})]

    def closing(self) -> list[Event]:
        events: list[Event] = [("content_block_stop", {"type": "content_block_stop", "index": 0})]
        if self.tool_use:
            delta = {"type": "input_json_delta", "partial_json": json.dumps(self.tool_use["input"])}
            events += [
                ("content_block_start", _block_start(1, {**self.tool_use, "input": {}})),
                ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": 1}),
            ]
        message_delta = {
            "type": "message_delta",
            "delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": self.usage()["output_tokens"]},
        }
        return [*events, ("message_delta", message_delta), ("message_stop", {"type": "message_stop"})]


def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text=json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": "JSON"}}),
            content_type="application/json",
        )
    return body


def routes(recorder: Recorder) -> list[web.RouteDef]:
    async def messages(request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        exchange = exchange_of(body)
        stream = bool(body.get("stream"))
        received = recorder.record(
            ENDPOINT, str(body.get("model", "")), exchange, stream=stream, api_key=api_key_of(request)
        )
        message = _Message(body, exchange, reply_to(exchange))
        return await answer(request, message, received, stream=stream)

    async def count_tokens(request: web.Request) -> web.Response:
        raw = await request.read()
        return web.json_response({"input_tokens": max(1, len(raw) // 4)})

    return [web.post("/v1/messages", messages), web.post("/v1/messages/count_tokens", count_tokens)]
