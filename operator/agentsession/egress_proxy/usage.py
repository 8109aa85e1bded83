"""The tokens a model call used, read from the provider's own answer as it passes through, chunk by chunk.

Streams are server-sent events: only the few events that carry usage are parsed as JSON (Anthropic
`message_start` and `message_delta`, OpenAI `response.completed` and its failed and incomplete siblings, or a
Chat Completions chunk with `usage`, Gemini chunks with `usageMetadata`, the last of which counts). A line longer
than `MAX_LINE_BYTES` is skipped, never held. A whole JSON answer is kept up to `MAX_JSON_BYTES` to be read at
its end; a larger one is passed on unmetered.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Final, Protocol

from agentsession.egress_proxy.prices import Tokens

MAX_LINE_BYTES: Final = 4 * 1024 * 1024
MAX_JSON_BYTES: Final = 16 * 1024 * 1024
_OPENAI_FINAL: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class _Reader(Protocol):
    def wants(self, event: str | None, data: str) -> bool:
        """Whether this event may carry usage (cheap: a look at its name or text, before any JSON parsing)."""

    def event(self, event: str | None, data: Any) -> None: ...

    def whole(self, body: Any) -> None: ...

    def tokens(self) -> Tokens | None: ...


class AnthropicReader:
    """Messages API: `message_start` carries the input side, `message_delta` the running output count."""

    def __init__(self) -> None:
        self._usage: dict[str, Any] | None = None
        self._model = ""

    def wants(self, event: str | None, data: str) -> bool:
        return event in ("message_start", "message_delta")

    def event(self, event: str | None, data: Any) -> None:
        data = _dict(data)
        if event == "message_start":
            self.whole(data.get("message"))
        elif isinstance(data.get("usage"), dict):
            # message_delta's counts are cumulative: they replace, field by field, what message_start said.
            self._usage = {**(self._usage or {}), **data["usage"]}

    def whole(self, body: Any) -> None:
        body = _dict(body)
        if isinstance(body.get("usage"), dict):
            self._usage = dict(body["usage"])
        self._model = str(body.get("model") or self._model)

    def tokens(self) -> Tokens | None:
        if self._usage is None:
            return None
        usage = self._usage
        return Tokens(
            # Cache writes are input not read from the cache.
            input=_int(usage.get("input_tokens")) + _int(usage.get("cache_creation_input_tokens")),
            output=_int(usage.get("output_tokens")),
            cached=_int(usage.get("cache_read_input_tokens")),
            model=self._model,
        )


class OpenAIReader:
    """Responses API (`response.completed`), and Chat Completions (a chunk or answer with `usage`)."""

    def __init__(self) -> None:
        self._tokens: Tokens | None = None

    def wants(self, event: str | None, data: str) -> bool:
        return event in _OPENAI_FINAL or (event is None and '"usage"' in data)

    def event(self, event: str | None, data: Any) -> None:
        data = _dict(data)
        self.whole(data.get("response") if event in _OPENAI_FINAL else data)

    def whole(self, body: Any) -> None:
        body = _dict(body)
        usage = body.get("usage")
        if not isinstance(usage, dict):
            return
        model = str(body.get("model") or "")
        if "input_tokens" in usage:
            total_in = _int(usage.get("input_tokens"))
            cached = min(total_in, _int(_dict(usage.get("input_tokens_details")).get("cached_tokens")))
            output = _int(usage.get("output_tokens"))
        else:
            total_in = _int(usage.get("prompt_tokens"))
            cached = min(total_in, _int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens")))
            output = _int(usage.get("completion_tokens"))
        self._tokens = Tokens(input=total_in - cached, output=output, cached=cached, model=model)

    def tokens(self) -> Tokens | None:
        return self._tokens


class GeminiReader:
    """generateContent and streamGenerateContent: the last `usageMetadata` holds the call's totals."""

    def __init__(self, model: str) -> None:
        self._usage: dict[str, Any] | None = None
        self._model = model

    def wants(self, event: str | None, data: str) -> bool:
        return '"usageMetadata"' in data

    def event(self, event: str | None, data: Any) -> None:
        self.whole(data)

    def whole(self, body: Any) -> None:
        # Without alt=sse, the stream is one JSON array of the chunks.
        for chunk in body if isinstance(body, list) else [body]:
            chunk = _dict(chunk)
            if isinstance(chunk.get("usageMetadata"), dict):
                self._usage = chunk["usageMetadata"]
            self._model = str(chunk.get("modelVersion") or self._model)

    def tokens(self) -> Tokens | None:
        if self._usage is None:
            return None
        usage = self._usage
        prompt = _int(usage.get("promptTokenCount"))
        cached = min(prompt, _int(usage.get("cachedContentTokenCount")))
        output = _int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount"))
        return Tokens(input=prompt - cached, output=output, cached=cached, model=self._model)


def reader_for(provider: str, model_hint: str = "") -> _Reader:
    if provider == "anthropic":
        return AnthropicReader()
    if provider == "openai":
        return OpenAIReader()
    return GeminiReader(model_hint)


class Meter:
    """Fed every chunk of an answer as it passes; `tokens()` at its end (None when no usage was seen)."""

    def __init__(self, provider: str, *, streaming: bool, model_hint: str = "") -> None:
        self._reader = reader_for(provider, model_hint)
        self._streaming = streaming
        self._buffer = bytearray()
        self._skipping = False  # inside a line longer than MAX_LINE_BYTES
        self._overflow = False  # a whole answer larger than MAX_JSON_BYTES
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> None:
        if not self._streaming:
            if not self._overflow:
                self._buffer += chunk
                if len(self._buffer) > MAX_JSON_BYTES:
                    self._overflow = True
                    self._buffer = bytearray()
            return
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            else:
                self._buffer += chunk[start:end]
                self._line(bytes(self._buffer))
            self._buffer.clear()
            start = end + 1
        if not self._skipping:
            self._buffer += chunk[start:]
            if len(self._buffer) > MAX_LINE_BYTES:
                self._skipping = True
                self._buffer.clear()

    def _line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if not line:
            self._dispatch()
        elif line.startswith("event:"):
            self._event = line[6:].strip()
        elif line.startswith("data:"):
            self._data.append(line[5:].lstrip(" "))

    def _dispatch(self) -> None:
        event, data = self._event, "\n".join(self._data)
        self._event, self._data = None, []
        if not data or not self._reader.wants(event, data):
            return
        try:
            parsed = json.loads(data)
        except ValueError:
            return
        self._reader.event(event, parsed)

    def tokens(self) -> Tokens | None:
        if self._streaming:
            if self._buffer and not self._skipping:
                self._line(bytes(self._buffer))
                self._buffer.clear()
            self._dispatch()
        elif self._buffer and not self._overflow:
            with contextlib.suppress(ValueError):
                self._reader.whole(json.loads(bytes(self._buffer)))
            self._buffer = bytearray()
        return self._reader.tokens()
