"""A hostile ACP agent for tests: it answers just enough of ACP (initialize, session/new, session/load,
session/prompt) to be started, and floods its output when prompted.

A prompt `flood COUNT SIZE` makes it write COUNT `agent_message_chunk` updates of SIZE characters each, straight
to its stdout (no SDK: as fast as the pipe takes them), before it answers the turn. It runs as a script
(`python tests/support/flood_agent.py`), so it needs nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

FLOOD = re.compile(r"flood (\d+) (\d+)")
SESSION_ID = "flood-session"


def _write(message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _answer(request_id: Any, result: dict[str, Any]) -> None:
    _write({"jsonrpc": "2.0", "id": request_id, "result": result})


def _flood(text: str) -> None:
    cue = FLOOD.search(text)
    if cue is None:
        return
    count, size = int(cue.group(1)), int(cue.group(2))
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x" * size}}
    line = json.dumps(
        {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION_ID, "update": update}},
        separators=(",", ":"),
    ).encode()
    for _ in range(count):
        view = memoryview(line + b"\n")
        while view:
            view = view[os.write(1, view) :]


def _prompt_text(params: dict[str, Any]) -> str:
    blocks = params.get("prompt") or []
    return " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))


def main() -> int:
    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        method, request_id, params = message.get("method"), message.get("id"), message.get("params") or {}
        if request_id is None:
            continue  # a notification (session/cancel): nothing to answer
        if method == "initialize":
            _answer(request_id, {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}})
        elif method in ("session/new", "session/load"):
            _answer(request_id, {"sessionId": SESSION_ID} if method == "session/new" else {})
        elif method == "session/prompt":
            _flood(_prompt_text(params))
            _answer(request_id, {"stopReason": "end_turn"})
        else:
            _write({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "not here"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
