"""A hostile ACP agent for the hostile-tenant tier: plain line-based JSON-RPC on stdin/stdout, no SDK, so every byte
it writes is exactly the one a test asks for. Run it as `python hostile_agent.py [--bloat] [--session-id ID]`.

It answers initialize, session/new, session/set_mode and session/prompt as a well-behaved agent would; cues in the
prompt text make it misbehave first:

- `__nested__`: a line of 100,000 `[` (deeper than any JSON parser's recursion limit);
- `__deep_update__`: a session/update whose content nests 900 levels (parses, but too deep to handle);
- `__huge__`: one line of 50 MiB (a session/update with a 50 MiB text);
- `__costly__`: a session/update of a few MiB made of empty objects (cheap to send, dear to parse);
- `__garbage__`: a line that is not JSON;
- `__bad_envelopes__`: JSON-RPC shapes a client cannot act on (an array as id, a method that is a number);
- `__kinds N__`: N session/updates, each of a different unknown kind with a long name;
- `__permissions N__`: N permission requests at once, each with a tool call of 512 KiB;
- `__stderr__`: 30 lines of 1 MiB on stderr.

and some make it answer the prompt itself wrongly (then no other answer comes):

- `__nested_answer__`: the answer nests 100,000 levels;
- `__huge_answer__`: the answer is a line of 50 MiB;
- `__malformed_error__`: the answer's `error` is a string, not an object;
- `__loop_killer__`: a request of the method `_test/kill_receive_loop` (which a test's fault injection turns into
  a failure of agentctl's receive loop), then the answer.

`--bloat` makes what the agent says about itself enormous: its agentInfo, its modes (1,000 of them, with long names
and descriptions), its current mode id and its authentication methods.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

MIB = 1024 * 1024
NESTING = 100_000
DEEP_UPDATE_LEVELS = 900
HUGE_BYTES = 50 * MIB
COSTLY_BYTES = 6 * MIB
PERMISSION_TOOL_CALL_BYTES = 512 * 1024
# Enough to make a session's status several MiB, each answer still a line under agentctl's limit.
BLOAT_MODES = 1000
LOOP_KILLER = "_test/kill_receive_loop"
_KINDS = re.compile(r"__kinds (\d{1,6})__")
_PERMISSIONS = re.compile(r"__permissions (\d{1,4})__")


def write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def send(message: dict[str, Any]) -> None:
    write(json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode() + b"\n")


def update(session_id: str, body: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": session_id, "update": body}})


def text_chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


class Agent:
    def __init__(self, bloat: bool, session_id: str) -> None:
        self.bloat = bloat
        self.session_id = session_id
        self.mode = "ask"
        self.next_id = 0

    def modes(self) -> dict[str, Any]:
        if not self.bloat:
            available = [
                {"id": "ask", "name": "Ask", "description": "Answer questions"},
                {"id": "code", "name": "Code", "description": "Write code"},
            ]
            return {"currentModeId": self.mode, "availableModes": available}
        available = [
            {"id": f"mode-{i}", "name": "N" * 2000, "description": "D" * 2000} for i in range(BLOAT_MODES)
        ]
        return {"currentModeId": "C" * MIB, "availableModes": available}

    def initialize(self) -> dict[str, Any]:
        info = {"name": "hostile-agent", "title": "Hostile agent", "version": "1"}
        auth: list[dict[str, Any]] = []
        if self.bloat:
            info = {"name": "n" * MIB, "title": "t" * MIB, "version": "v" * MIB}
            auth = [
                {"type": "env_var", "id": f"key-{i}-" + "k" * 1000, "name": "k", "vars": [{"name": "K"}]}
                for i in range(BLOAT_MODES)
            ]
        return {
            "protocolVersion": 1,
            "agentCapabilities": {"loadSession": False},
            "agentInfo": info,
            "authMethods": auth,
        }

    def request(self, method: str, params: dict[str, Any]) -> None:
        self.next_id += 1
        send({"id": f"agent-{self.next_id}", "method": method, "params": params})

    def prompt(self, request_id: Any, text: str) -> None:
        sid = self.session_id
        if "__nested__" in text:
            write(b"[" * NESTING + b"\n")
        if "__deep_update__" in text:
            deep: Any = "bottom"
            for _ in range(DEEP_UPDATE_LEVELS):
                deep = [deep]
            update(sid, {**text_chunk("deep"), "_meta": {"deep": deep}})
        if "__huge__" in text:
            update(sid, text_chunk("x" * HUGE_BYTES))
        if "__costly__" in text:
            update(sid, {**text_chunk("costly"), "_meta": {"many": [{}] * (COSTLY_BYTES // 3)}})
        if "__garbage__" in text:
            write(b"this line is not JSON-RPC\n")
        if "__bad_envelopes__" in text:
            send({"id": [1], "result": {}})
            send({"id": {"a": 1}, "method": "session/request_permission", "params": {}})
            send({"method": 42, "params": {}})
        if kinds := _KINDS.search(text):
            for i in range(int(kinds.group(1))):
                update(sid, {"sessionUpdate": f"kind-{i}-" + "k" * 10_000})
        if permissions := _PERMISSIONS.search(text):
            for i in range(int(permissions.group(1))):
                tool_call = {
                    "toolCallId": f"call-{i}",
                    "title": "Write a big file",
                    "kind": "edit",
                    "status": "pending",
                    "rawInput": {"content": "p" * PERMISSION_TOOL_CALL_BYTES},
                }
                options = [
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ]
                self.request(
                    "session/request_permission",
                    {"sessionId": sid, "toolCall": tool_call, "options": options},
                )
        if "__stderr__" in text:
            for _ in range(30):
                os.write(2, b"e" * MIB + b"\n")
        head = json.dumps({"jsonrpc": "2.0", "id": request_id}, separators=(",", ":"))[:-1].encode()
        if "__nested_answer__" in text:
            write(head + b',"result":' + b"[" * NESTING + b"\n")
            return
        if "__huge_answer__" in text:
            write(head + b',"result":{"stopReason":"end_turn","_meta":{"x":"' + b"x" * HUGE_BYTES + b'"}}}\n')
            return
        if "__malformed_error__" in text:
            send({"id": request_id, "error": "no"})
            return
        if "__loop_killer__" in text:
            self.request(LOOP_KILLER, {})
        update(sid, text_chunk(f"ok: {text}"))
        send({"id": request_id, "result": {"stopReason": "end_turn"}})

    def handle(self, message: dict[str, Any]) -> None:
        method, request_id, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None:
            return  # an answer to one of our requests
        if method == "initialize":
            send({"id": request_id, "result": self.initialize()})
        elif method == "session/new":
            send({"id": request_id, "result": {"sessionId": self.session_id, "modes": self.modes()}})
        elif method == "session/set_mode":
            self.mode = str(params.get("modeId"))
            send({"id": request_id, "result": {}})
        elif method == "session/prompt":
            blocks = params.get("prompt") or []
            self.prompt(request_id, " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict)))
        elif request_id is not None:
            send({"id": request_id, "error": {"code": -32601, "message": f"method not found: {method}"}})


def main() -> int:
    parser = argparse.ArgumentParser(prog="hostile-agent")
    parser.add_argument(
        "--bloat", action="store_true", help="describe itself with enormous strings and lists"
    )
    parser.add_argument("--session-id", default="hostile-session", help="the ACP session id it gives")
    args = parser.parse_args()
    agent = Agent(args.bloat, args.session_id)
    try:
        for line in sys.stdin.buffer:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                agent.handle(message)
    except BrokenPipeError:
        # agentctl closed its end while an answer was on its way: the connection is over, as at the end of the
        # input. Whatever is still buffered for stdout goes nowhere instead of failing the exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
