"""The usage readers of the egress proxy, on the model stub's own streams and on vendors' documented shapes, cut
into chunks at every kind of boundary."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentsession.egress_proxy.prices import Tokens
from agentsession.egress_proxy.usage import MAX_LINE_BYTES, Meter
from agentsession.model_stub import anthropic_api, gemini_api, openai_api
from agentsession.model_stub.script import reply_to
from agentsession.model_stub.sse import Renderer, encode

PROMPT = "tell me about the egress proxy"


def _stream(renderer: Renderer) -> bytes:
    events = [*renderer.opening(), *(e for chunk in renderer.reply.chunks for e in renderer.text(chunk))]
    return b"".join(encode(event) for event in [*events, *renderer.closing()])


def _anthropic() -> tuple[anthropic_api._Message, dict[str, Any]]:
    body = {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": [{"name": "x"}],
    }
    exchange = anthropic_api.exchange_of(body)
    return anthropic_api._Message(body, exchange, reply_to(exchange)), body


def _openai() -> tuple[Renderer, dict[str, Any]]:
    body = {"model": "gpt-5-codex", "input": PROMPT, "tools": [{"name": "shell"}]}
    exchange = openai_api.exchange_of(body)
    return openai_api._Response(body, exchange, reply_to(exchange)), body


def _gemini() -> tuple[Renderer, dict[str, Any]]:
    body = {
        "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
        "tools": [{"functionDeclarations": []}],
    }
    exchange = gemini_api.exchange_of(body)
    return gemini_api._Candidate(body, "gemini-2.5-pro", exchange, reply_to(exchange)), body


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _metered(
    provider: str, data: bytes, size: int, *, streaming: bool = True, hint: str = ""
) -> Tokens | None:
    meter = Meter(provider, streaming=streaming, model_hint=hint)
    for chunk in _chunks(data, size):
        meter.feed(chunk)
    return meter.tokens()


@pytest.mark.parametrize("size", [1, 7, 64, 10**6])
def test_the_model_stubs_streams_are_metered_whatever_the_chunking(size: int) -> None:
    message, _ = _anthropic()
    output = message.usage()["output_tokens"]
    assert _metered("anthropic", _stream(message), size) == Tokens(10, output, 0, "claude-sonnet-4-5")
    response, _ = _openai()
    assert _metered("openai", _stream(response), size) == Tokens(10, output, 0, "gpt-5-codex")
    candidate, _ = _gemini()
    assert _metered("gemini", _stream(candidate), size, hint="gemini-2.5-pro") == Tokens(
        10, output, 0, "gemini-2.5-pro"
    )


def test_whole_json_answers_are_metered() -> None:
    for provider, (renderer, _) in (
        ("anthropic", _anthropic()),
        ("openai", _openai()),
        ("gemini", _gemini()),
    ):
        tokens = _metered(provider, json.dumps(renderer.whole()).encode(), 5, streaming=False)
        assert tokens is not None, provider
        assert (tokens.input, tokens.output > 0) == (10, True), provider


def _sse(*events: tuple[str | None, dict[str, Any]]) -> bytes:
    return b"".join(encode(event) for event in events)


def test_anthropic_cache_reads_are_cached_and_cache_writes_are_input() -> None:
    start = {
        "type": "message_start",
        "message": {
            "model": "claude-opus-4-1",
            "usage": {"input_tokens": 3, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000,
                      "output_tokens": 1},
        },
    }  # fmt: skip
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}}
    data = _sse(("message_start", start), ("ping", {"type": "ping"}), ("message_delta", delta))
    assert _metered("anthropic", data, 3) == Tokens(103, 42, 2000, "claude-opus-4-1")


def test_openai_cached_input_is_taken_out_of_input() -> None:
    usage = {"input_tokens": 5000, "input_tokens_details": {"cached_tokens": 4096}, "output_tokens": 77}
    done = {"type": "response.completed", "response": {"model": "gpt-5", "usage": usage}}
    assert _metered("openai", _sse(("response.completed", done)), 11) == Tokens(904, 77, 4096, "gpt-5")


def test_openai_chat_completions_usage_chunk() -> None:
    chunk = {"model": "gpt-4o", "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 9,
                                                         "prompt_tokens_details": {"cached_tokens": 10}}}  # fmt: skip
    data = _sse((None, {"choices": [{"delta": {"content": "hi"}}]}), (None, chunk)) + b"data: [DONE]\n\n"
    assert _metered("openai", data, 4) == Tokens(40, 9, 10, "gpt-4o")


def test_gemini_counts_the_last_usage_metadata_and_thoughts_as_output() -> None:
    first = {"candidates": [], "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 1}}
    last = {
        "candidates": [],
        "modelVersion": "gemini-2.5-flash",
        "usageMetadata": {"promptTokenCount": 700, "cachedContentTokenCount": 600, "candidatesTokenCount": 20,
                          "thoughtsTokenCount": 30},
    }  # fmt: skip
    assert _metered("gemini", _sse((None, first), (None, last)), 9) == Tokens(
        100, 50, 600, "gemini-2.5-flash"
    )
    # Without alt=sse the answer is one JSON array of the chunks.
    whole = json.dumps([first, last]).encode()
    assert _metered("gemini", whole, 9, streaming=False) == Tokens(100, 50, 600, "gemini-2.5-flash")


def test_no_usage_is_none_and_a_cut_stream_keeps_what_it_saw() -> None:
    assert _metered("anthropic", b"event: ping\ndata: {}\n\n", 2) is None
    assert _metered("openai", b"", 1) is None
    message, _ = _anthropic()
    stream = _stream(message)
    cut = stream[: stream.index(b"event: content_block_delta")]
    tokens = _metered("anthropic", cut, 13)
    assert tokens is not None
    assert tokens.input == 10


def test_an_overlong_line_is_skipped_not_held() -> None:
    meter = Meter("openai", streaming=True)
    meter.feed(b"data: " + b"x" * (MAX_LINE_BYTES + 10))
    assert len(meter._buffer) == 0
    meter.feed(b"still the same line\n\n")
    usage = {"input_tokens": 1, "output_tokens": 2}
    meter.feed(_sse(("response.completed", {"type": "response.completed", "response": {"usage": usage}})))
    assert meter.tokens() == Tokens(1, 2, 0, "")


def test_crlf_lines_and_bad_json_are_tolerated() -> None:
    usage = {"input_tokens": 4, "output_tokens": 5}
    good = json.dumps({"type": "response.completed", "response": {"usage": usage}})
    data = (
        f"event: response.completed\r\ndata: {{nope\r\n\r\nevent: response.completed\r\ndata: {good}\r\n\r\n"
    )
    assert _metered("openai", data.encode(), 6) == Tokens(4, 5, 0, "")
