"""The Gemini API (`:streamGenerateContent?alt=sse`, `:generateContent`, `:countTokens`) as Gemini CLI calls it.

Gemini CLI opens each conversation with a tagged `<session_context>` text naming its workspace directories; the
prompt is the last untagged user text. It writes files with `write_file` (an absolute `file_path`) and gets the
outcome back as a `functionResponse` part. Its side requests have no tools: before each turn it asks a small
model to rate the prompt's complexity as JSON matching `generationConfig.responseJsonSchema`, so a side request
with a schema is answered with an object of that shape.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from agentsession.model_stub.recorder import Recorder, api_key_of
from agentsession.model_stub.script import SIDE_REPLY, Exchange, Reply, ToolResult, reply_to
from agentsession.model_stub.sse import Event, answer

ENDPOINT = "gemini.generate_content"
WRITE_TOOL = "write_file"
_WORKSPACE = re.compile(r"Workspace Directories:\W*\n\s*-\s*(\S+)")


def _texts(content: dict[str, Any]) -> list[str]:
    return [str(p["text"]) for p in content.get("parts") or [] if isinstance(p, dict) and "text" in p]


def exchange_of(body: dict[str, Any]) -> Exchange:
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    prompts: list[str] = []
    workdir = None
    for content in contents:
        if content.get("role", "user") != "user":
            continue
        for text in _texts(content):
            if (found := _WORKSPACE.search(text)) is not None:
                workdir = found.group(1)
            elif text.strip() and not text.lstrip().startswith("<"):
                prompts.append(text.strip())
    tool_result = None
    last_parts = contents[-1].get("parts") or [] if contents else []
    responses = [p["functionResponse"] for p in last_parts if isinstance(p, dict) and "functionResponse" in p]
    if responses:
        answers = [r.get("response") or {} for r in responses if isinstance(r, dict)]
        tool_result = ToolResult(
            text=json.dumps(answers), is_error=any(isinstance(a, dict) and "error" in a for a in answers)
        )
    return Exchange(
        prompt=prompts[-1] if prompts else "",
        prompts=tuple(prompts),
        tool_result=tool_result,
        workdir=workdir,
        side=not body.get("tools"),
    )


def sample_of(schema: Any) -> Any:
    """The smallest value of a JSON schema's shape: what a side request that asks for JSON can parse."""
    if not isinstance(schema, dict):
        return SIDE_REPLY
    kind = str(schema.get("type", "string")).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        return {str(k): sample_of(v) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return SIDE_REPLY


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {
        str(f.get("name"))
        for tool in body.get("tools") or []
        if isinstance(tool, dict)
        for f in tool.get("functionDeclarations") or []
        if isinstance(f, dict)
    }


class _Candidate:
    """One model turn: text chunks, then maybe a function call, as SSE chunks or as one response."""

    def __init__(self, body: dict[str, Any], model: str, exchange: Exchange, reply: Reply) -> None:
        self.model = model
        self.reply = reply
        self.call: dict[str, Any] | None = None
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if exchange.side and schema is not None:
            self.reply = Reply((json.dumps(sample_of(schema)),))
        elif reply.write is not None and WRITE_TOOL in _tool_names(body) and exchange.workdir:
            args = {"file_path": reply.write.path_in(exchange.workdir), "content": reply.write.content}
            self.call = {"functionCall": {"name": WRITE_TOOL, "args": args}}
        elif reply.write is not None:
            self.reply = Reply((f"Cannot write {reply.write.name}: no {WRITE_TOOL} tool or workspace.",))

    def _chunk(self, parts: list[dict[str, Any]], final: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": self.model}
        if final:
            candidate["finishReason"] = "STOP"
            tokens = max(1, len(self.reply.text) // 4)
            chunk["usageMetadata"] = {
                "promptTokenCount": 10,
                "candidatesTokenCount": tokens,
                "totalTokenCount": 10 + tokens,
            }
        return chunk

    def whole(self) -> dict[str, Any]:
        return self._chunk([{"text": self.reply.text}, *([self.call] if self.call else [])], final=True)

    def opening(self) -> list[Event]:
        return []

    def text(self, chunk: str) -> list[Event]:
        return [(None, self._chunk([{"text": chunk}], final=False))]

    def closing(self) -> list[Event]:
        return [(None, self._chunk([self.call] if self.call else [{"text": ""}], final=True))]


def routes(recorder: Recorder) -> list[web.RouteDef]:
    async def models(request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["target"].partition(":")
        if method == "countTokens":
            return web.json_response({"totalTokens": max(1, len(await request.read()) // 4)})
        if method not in ("generateContent", "streamGenerateContent"):
            return web.json_response({"error": {"code": 404, "message": f"no method {method!r}"}}, status=404)
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response(
                {"error": {"code": 400, "message": "expected a JSON object"}}, status=400
            )
        exchange = exchange_of(body)
        stream = method == "streamGenerateContent"
        received = recorder.record(ENDPOINT, model, exchange, stream=stream, api_key=api_key_of(request))
        candidate = _Candidate(body, model, exchange, reply_to(exchange))
        return await answer(request, candidate, received, stream=stream)

    return [web.post("/v1beta/models/{target}", models)]
