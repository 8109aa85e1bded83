"""The OpenAI Responses API (`POST /v1/responses`, streamed) as Codex calls it.

Codex sends its environment as a tagged user message (`<environment_context>`), so the prompt is the last
untagged user text. It runs commands in the session's working directory through `exec_command` (`{"cmd": ...}`)
or, in older versions, `shell` (`{"command": [...]}`); a file is written with `printf`. The command's output
comes back as a `function_call_output` item whose text carries the exit code, or says the user rejected it.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from typing import Any

from aiohttp import web

from agentsession.model_stub.ids import stable_id
from agentsession.model_stub.recorder import Recorder, api_key_of
from agentsession.model_stub.script import Exchange, FileWrite, Reply, ToolResult, reply_to
from agentsession.model_stub.sse import Event, answer

ENDPOINT = "openai.responses"
_CWD = re.compile(r"<cwd>([^<]+)</cwd>")
_EXIT_CODE = re.compile(r"exit(?:ed with)? code:?\s*(-?\d+)", re.IGNORECASE)
_OUTPUT_TYPES = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _tool_result(item: dict[str, Any]) -> ToolResult:
    output = item.get("output")
    if isinstance(output, dict):
        output = output.get("content", "")
    text = _text_of(output)
    code = _EXIT_CODE.search(text)
    return ToolResult(text=text, is_error=bool(code and code.group(1) != "0"))


def exchange_of(body: dict[str, Any]) -> Exchange:
    raw = body.get("input")
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw or []
    items = [i for i in items if isinstance(i, dict)]
    prompts: list[str] = []
    workdir = None
    for item in items:
        if item.get("role") != "user":
            continue
        text = _text_of(item.get("content")).strip()
        if (cwd := _CWD.search(text)) is not None:
            workdir = cwd.group(1).strip()
        elif text and not text.startswith("<"):
            prompts.append(text)
    last = items[-1] if items else {}
    return Exchange(
        prompt=prompts[-1] if prompts else "",
        prompts=tuple(prompts),
        tool_result=_tool_result(last) if last.get("type") in _OUTPUT_TYPES else None,
        workdir=workdir,
        side=not body.get("tools"),
    )


def _shell_call(tools: set[str], write: FileWrite) -> tuple[str, dict[str, Any]] | None:
    command = f"printf '%s' {shlex.quote(write.content)} > {shlex.quote(write.name)}"
    if "exec_command" in tools:
        return "exec_command", {"cmd": command}
    if "shell" in tools:
        return "shell", {"command": ["bash", "-lc", command]}
    return None


class _Response:
    """One response object: a message item and maybe a function call item, as stream events or as a whole."""

    def __init__(self, body: dict[str, Any], exchange: Exchange, reply: Reply) -> None:
        turn = len(body.get("input") or [])
        self.id = stable_id("resp_stub_", turn, exchange.prompt, exchange.kind)
        self.message_id = stable_id("msg_stub_", turn, exchange.prompt, exchange.kind)
        self.model = str(body.get("model", ""))
        self.created = int(time.time())
        self.reply = reply
        self.sequence = 0
        self.call: dict[str, Any] | None = None
        tools = {str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)}
        shell = _shell_call(tools, reply.write) if reply.write is not None else None
        if shell is not None:
            name, arguments = shell
            self.call = {
                "type": "function_call",
                "id": stable_id("fc_stub_", turn, exchange.prompt),
                "call_id": stable_id("call_stub_", turn, exchange.prompt),
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
        elif reply.write is not None:
            self.reply = Reply((f"Cannot write {reply.write.name}: no shell tool.",))

    def _message(self, status: str) -> dict[str, Any]:
        part = {"type": "output_text", "text": self.reply.text, "annotations": []}
        return {
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": [part] if status == "completed" else [],
        }

    def whole(self, status: str = "completed") -> dict[str, Any]:
        output = [self._message("completed")] + ([self.call] if self.call else [])
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output if status == "completed" else [],
            "usage": {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": max(1, len(self.reply.text) // 4),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 10 + max(1, len(self.reply.text) // 4),
            },
        }

    def _event(self, kind: str, **data: Any) -> Event:
        self.sequence += 1
        return kind, {"type": kind, "sequence_number": self.sequence, **data}

    def _part(self, **data: Any) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": 0, "content_index": 0, **data}

    def opening(self) -> list[Event]:
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            self._event("response.created", response=self.whole("in_progress")),
            self._event("response.in_progress", response=self.whole("in_progress")),
            self._event("response.output_item.added", output_index=0, item=self._message("in_progress")),
            self._event("response.content_part.added", **self._part(part=part)),
        ]

    def text(self, chunk: str) -> list[Event]:
        return [self._event("response.output_text.delta", **self._part(delta=chunk))]

    def closing(self) -> list[Event]:
        text = self.reply.text
        part = {"type": "output_text", "text": text, "annotations": []}
        events = [
            self._event("response.output_text.done", **self._part(text=text)),
            self._event("response.content_part.done", **self._part(part=part)),
            self._event("response.output_item.done", output_index=0, item=self._message("completed")),
        ]
        if self.call:
            call, arguments = self.call, self.call["arguments"]
            where = {"item_id": call["id"], "output_index": 1}
            events += [
                self._event(
                    "response.output_item.added",
                    output_index=1,
                    item={**call, "arguments": "", "status": "in_progress"},
                ),
                self._event("response.function_call_arguments.delta", **where, delta=arguments),
                self._event("response.function_call_arguments.done", **where, arguments=arguments),
                self._event("response.output_item.done", output_index=1, item=call),
            ]
        return [*events, self._event("response.completed", response=self.whole())]


def routes(recorder: Recorder) -> list[web.RouteDef]:
    async def responses(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "expected a JSON object"}}, status=400)
        exchange = exchange_of(body)
        stream = bool(body.get("stream"))
        received = recorder.record(
            ENDPOINT, str(body.get("model", "")), exchange, stream=stream, api_key=api_key_of(request)
        )
        response = _Response(body, exchange, reply_to(exchange))
        return await answer(request, response, received, stream=stream)

    return [web.post("/v1/responses", responses)]
