"""The model stub as a real process: the event sequences of each API, its cues, hang-ups, and `/requests`."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentsession.model_stub.script import SIDE_REPLY, WRITE_CONTENT
from tests.component.conftest import free_port, wait_until
from tests.support.model_stub import ModelStub, model_stub, sse_events

Events = list[tuple[str | None, dict[str, Any]]]


@pytest.fixture
async def stub(tmp_path: Path, http: aiohttp.ClientSession) -> AsyncIterator[ModelStub]:
    async with model_stub(free_port(), tmp_path / "model-stub.log", http) as running:
        yield running


async def post_sse(stub: ModelStub, path: str, body: dict[str, Any]) -> Events:
    async with stub.http.post(stub.url + path, json=body) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "text/event-stream"
        return [event async for event in sse_events(resp)]


def anthropic_body(*messages: dict[str, Any], tools: bool = True) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": True,
        "system": [{"type": "text", "text": "# Environment\n - Primary working directory: /work/space\n"}],
        "tools": [{"name": "Bash"}, {"name": "Write"}] if tools else [],
        "messages": list(messages),
    }


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def anthropic_text(events: Events) -> str:
    return "".join(
        d["delta"]["text"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "text_delta"
    )


async def test_anthropic_streams_text_in_chunks(stub: ModelStub) -> None:
    reminder = text("<system-reminder>\nskills\n</system-reminder>")
    events = await post_sse(stub, "/v1/messages", anthropic_body(user(reminder, text("hello there"))))
    names = [n for n, _ in events]
    deltas = names.count("content_block_delta")
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert deltas >= 3
    assert all(n == d["type"] for n, d in events)
    assert events[0][1]["message"]["model"] == "claude-test"
    assert anthropic_text(events) == "Hello from the model stub. You said: hello there"
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"


async def test_anthropic_write_calls_the_write_tool_then_reports(stub: ModelStub) -> None:
    events = await post_sse(stub, "/v1/messages", anthropic_body(user(text("please write hello.txt"))))
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "tool_use"]
    tool_use = starts[1]
    assert tool_use["name"] == "Write"
    partial = "".join(
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(partial) == {"file_path": "/work/space/hello.txt", "content": WRITE_CONTENT}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"

    call = {"role": "assistant", "content": [text("Writing hello.txt."), {**tool_use, "input": {}}]}
    for result, expected in (
        ({"content": "File created successfully"}, "Wrote hello.txt"),
        ({"content": "User refused permission to run tool", "is_error": True}, "Not written"),
    ):
        answer = user({"type": "tool_result", "tool_use_id": tool_use["id"], **result})
        body = anthropic_body(user(text("please write hello.txt")), call, answer)
        events = await post_sse(stub, "/v1/messages", body)
        assert anthropic_text(events) == expected
        assert events[-2][1]["delta"]["stop_reason"] == "end_turn"

    received = await stub.requests()
    assert [(r["kind"], r["tool_result"]) for r in received] == [
        ("prompt", False),
        ("tool_result", True),
        ("tool_result", True),
    ]
    assert {r["text"] for r in received} == {"please write hello.txt"}


async def test_anthropic_side_requests_plain_answers_and_token_counts(stub: ModelStub) -> None:
    side = {**anthropic_body(user(text("Generate a title")), tools=False), "max_tokens": 1}
    assert anthropic_text(await post_sse(stub, "/v1/messages", side)) == SIDE_REPLY

    whole = {**anthropic_body(user(text("hi"))), "stream": False}
    async with stub.http.post(f"{stub.url}/v1/messages", json=whole) as resp:
        assert resp.status == 200
        message = await resp.json()
    assert message["type"] == "message"
    assert message["content"] == [text("Hello from the model stub. You said: hi")]
    assert message["stop_reason"] == "end_turn"

    async with stub.http.post(f"{stub.url}/v1/messages/count_tokens", json=whole) as resp:
        assert resp.status == 200
        assert (await resp.json())["input_tokens"] > 0
    assert [r["kind"] for r in await stub.requests()] == ["side", "prompt"]


def responses_body(*items: dict[str, Any]) -> dict[str, Any]:
    environment = "<environment_context>\n  <cwd>/work/space</cwd>\n</environment_context>"
    return {
        "model": "gpt-test",
        "stream": True,
        "tools": [{"type": "function", "name": "exec_command"}, {"type": "function", "name": "update_plan"}],
        "input": [responses_user(environment), *items],
    }


def responses_user(value: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}


def completed_output(events: Events) -> list[dict[str, Any]]:
    name, data = events[-1]
    assert name == "response.completed"
    output: list[dict[str, Any]] = data["response"]["output"]
    return output


async def test_responses_streams_text_in_chunks(stub: ModelStub) -> None:
    events = await post_sse(stub, "/v1/responses", responses_body(responses_user("hello there")))
    names = [n for n, _ in events]
    deltas = names.count("response.output_text.delta")
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert deltas >= 3
    assert [d["sequence_number"] for _, d in events] == list(range(1, len(events) + 1))
    said = "Hello from the model stub. You said: hello there"
    assert "".join(d["delta"] for n, d in events if n == "response.output_text.delta") == said
    assert completed_output(events) == [
        {
            "type": "message",
            "id": events[2][1]["item"]["id"],
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": said, "annotations": []}],
        }
    ]


async def test_responses_write_runs_a_shell_command_that_writes_the_file(
    stub: ModelStub, tmp_path: Path
) -> None:
    prompt = responses_user("write hello.txt")
    events = await post_sse(stub, "/v1/responses", responses_body(prompt))
    call = completed_output(events)[1]
    assert call["type"] == "function_call"
    assert call["name"] == "exec_command"
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert done[1] == call
    # The command is what Codex would run in the session's directory: run it and look.
    command = json.loads(call["arguments"])["cmd"]
    shell = await asyncio.create_subprocess_exec("bash", "-c", command, cwd=tmp_path)
    assert await shell.wait() == 0
    assert (tmp_path / "hello.txt").read_text() == WRITE_CONTENT

    for output, expected in (
        ("Chunk ID: 1\nWall time: 0.01 seconds\nProcess exited with code 0\nOutput:\n", "Wrote hello.txt"),
        ("Process exited with code 1\nOutput:\nbash: hello.txt: Permission denied", "Not written"),
        ("exec command rejected by user", "Not written"),
    ):
        answer = {"type": "function_call_output", "call_id": call["call_id"], "output": output}
        events = await post_sse(stub, "/v1/responses", responses_body(prompt, call, answer))
        assert completed_output(events)[0]["content"][0]["text"] == expected
        assert len(completed_output(events)) == 1
    assert [r["kind"] for r in await stub.requests()] == [
        "prompt",
        "tool_result",
        "tool_result",
        "tool_result",
    ]


def gemini_body(*contents: dict[str, Any], tools: bool = True) -> dict[str, Any]:
    context = "<session_context>\n- **Workspace Directories:**\n  - /work/space\n</session_context>"
    declarations = [{"name": "write_file"}, {"name": "run_shell_command"}]
    return {
        "contents": [{"role": "user", "parts": [{"text": context}]}, *contents],
        **({"tools": [{"functionDeclarations": declarations}]} if tools else {}),
    }


async def test_gemini_streams_text_and_calls_write_file(stub: ModelStub) -> None:
    path = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    hello = {"role": "user", "parts": [{"text": "hello there"}]}
    events = await post_sse(stub, path, gemini_body(hello))
    assert all(name is None for name, _ in events)
    candidates = [d["candidates"][0] for _, d in events]
    assert len(candidates) >= 4
    assert [c.get("finishReason") for c in candidates][-1] == "STOP"
    assert all("finishReason" not in c for c in candidates[:-1])
    said = "".join(p.get("text", "") for c in candidates for p in c["content"]["parts"])
    assert said == "Hello from the model stub. You said: hello there"

    write = {"role": "user", "parts": [{"text": "write hello.txt"}]}
    events = await post_sse(stub, path, gemini_body(write))
    calls = [
        p["functionCall"]
        for _, d in events
        for p in d["candidates"][0]["content"]["parts"]
        if "functionCall" in p
    ]
    assert calls == [
        {"name": "write_file", "args": {"file_path": "/work/space/hello.txt", "content": WRITE_CONTENT}}
    ]
    for response, expected in (
        ({"output": "Successfully created"}, "Wrote hello.txt"),
        ({"error": "no"}, "Not written"),
    ):
        answer = {
            "role": "user",
            "parts": [{"functionResponse": {"name": "write_file", "response": response}}],
        }
        model = {"role": "model", "parts": [{"functionCall": calls[0]}]}
        events = await post_sse(stub, path, gemini_body(write, model, answer))
        assert (
            "".join(p.get("text", "") for _, d in events for p in d["candidates"][0]["content"]["parts"])
            == expected
        )


async def test_gemini_side_request_gets_json_of_the_asked_shape(stub: ModelStub) -> None:
    schema = {
        "type": "OBJECT",
        "properties": {"complexity_reasoning": {"type": "STRING"}, "complexity_score": {"type": "INTEGER"}},
    }
    body = {
        **gemini_body({"role": "user", "parts": [{"text": "hello"}]}, tools=False),
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema},
    }
    async with stub.http.post(f"{stub.url}/v1beta/models/gemini-lite:generateContent", json=body) as resp:
        assert resp.status == 200
        answer = await resp.json()
    reply = json.loads(answer["candidates"][0]["content"]["parts"][0]["text"])
    assert reply == {"complexity_reasoning": SIDE_REPLY, "complexity_score": 1}
    assert [(r["endpoint"], r["model"], r["kind"]) for r in await stub.requests()] == [
        ("gemini.generate_content", "gemini-lite", "side")
    ]


@pytest.mark.parametrize(
    ("path", "body", "delta"),
    [
        ("/v1/messages", anthropic_body(user(text("be slow"))), "content_block_delta"),
        ("/v1/responses", responses_body(responses_user("be slow")), "response.output_text.delta"),
    ],
)
async def test_slow_reply_paces_chunks_and_stops_when_the_client_hangs_up(
    stub: ModelStub, path: str, body: dict[str, Any], delta: str
) -> None:
    arrivals: list[float] = []
    async with aiohttp.ClientSession() as client, client.post(stub.url + path, json=body) as resp:
        async for name, _ in sse_events(resp):
            if name == delta:
                arrivals.append(time.monotonic())
            if len(arrivals) == 3:
                break
    assert min(b - a for a, b in itertools.pairwise(arrivals)) >= 0.25

    async def disconnected() -> bool:
        return bool((await stub.requests())[0]["outcome"] == "disconnected")

    await wait_until(disconnected, "the stub to notice the hang-up", within=10)


async def test_requests_lists_what_reached_the_model_and_delete_clears_it(stub: ModelStub) -> None:
    first = anthropic_body(user(text("one")))
    # After a cancel Claude Code adds a user message of its own; it is not something the user typed.
    interrupted = user(text("[Request interrupted by user]"))
    second = anthropic_body(
        user(text("one")), interrupted, {"role": "assistant", "content": [text("ok")]}, user(text("two"))
    )
    await post_sse(stub, "/v1/messages", first)
    await post_sse(stub, "/v1/messages", second)
    assert await stub.requests() == [
        {
            "endpoint": "anthropic.messages",
            "model": "claude-test",
            "kind": "prompt",
            "text": "one",
            "tool_result": False,
            "prompts": ["one"],
            "stream": True,
            "api_key": "",
            "outcome": "completed",
        },
        {
            "endpoint": "anthropic.messages",
            "model": "claude-test",
            "kind": "prompt",
            "text": "two",
            "tool_result": False,
            "prompts": ["one", "two"],
            "stream": True,
            "api_key": "",
            "outcome": "completed",
        },
    ]
    await stub.clear()
    assert await stub.requests() == []
    async with stub.http.get(f"{stub.url}/healthz") as resp:
        assert (resp.status, await resp.json()) == (200, {"status": "ok"})


async def test_malformed_bodies_are_refused(stub: ModelStub) -> None:
    for path in ("/v1/messages", "/v1/responses", "/v1beta/models/m:streamGenerateContent"):
        async with stub.http.post(stub.url + path, data=b"[not json") as resp:
            assert resp.status == 400, path
    await asyncio.sleep(0)
    assert await stub.requests() == []
