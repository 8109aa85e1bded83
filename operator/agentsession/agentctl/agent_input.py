"""What agentctl takes from the agent's stdout: JSON-RPC 2.0 messages, one a line, within bounds.

The agent is not trusted. A line may be longer than any message (the transports' LINE_LIMIT), nested deeper than
the parser recurses (`"[" * 100000` raises RecursionError, not ValueError), cost far more memory to parse than its
size (`[{},{},...]`: 3 bytes of input, about 70 of objects), or be JSON that the SDK cannot act on (an id that is
an array, an error that is a string), which ends its receive loop at the first exception. Each is refused here,
saying what was wrong, with the message's id where it can be told, so that the one waiting for an answer gets an
error instead of waiting forever.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

MIB = 1024 * 1024
# Deeper than any ACP message (an update's tool input is a handful of levels below the envelope), shallow enough
# that whatever encodes or prints a message later (the journal, the streams, the gateway's parser) never recurses
# out of stack.
MAX_DEPTH = 64
# Below this size a line cannot cost much whatever its shape (at most about 25 times its size); above it the
# values are counted first, cheaply, and a line whose values would cost more than PARSE_BUDGET_BYTES is refused
# unparsed. The count is an upper bound (commas, colons and brackets inside strings count too), so text of real
# messages, even source code or JSON in a string, stays well below the budget.
COST_CHECK_BYTES = MIB
PARSE_BUDGET_BYTES = 96 * MIB
BYTES_PER_VALUE = 72
# How much of a refused line's head is kept to find its id and to show in the report.
HEAD_BYTES = 512
# The JSON-RPC id of a line whose head is an envelope, as the ACP SDKs write it: {"jsonrpc":"2.0","id":...,<kind>.
_HEAD = re.compile(
    rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,256}")\s*,\s*"(method|result|error)"'
)

JsonRpcId = int | str | None
# The code of the error answer that stands in for an answer of the agent's that agentctl refused (in the range
# JSON-RPC leaves to implementations), and the one agentctl answers a refused request of the agent's with.
REFUSED_ANSWER = -32090
INVALID_REQUEST = -32600


@dataclass(frozen=True, slots=True)
class Refusal:
    """A line that is not a message agentctl can take, and why. `id` is the message's id when it could be told;
    `request` says whether the agent sent a request (it waits for an answer) rather than a response."""

    reason: str
    id: JsonRpcId = None
    request: bool = False

    @property
    def answerable(self) -> bool:
        return self.id is not None


def parse_message(line: bytes) -> dict[str, Any] | Refusal:
    """One line of the agent's output (without its newline) as a JSON-RPC message, or why it is not one."""
    cost = parse_cost(line)
    if cost > PARSE_BUDGET_BYTES:
        return refuse_head(
            line,
            f"its {len(line)} bytes would take about {cost // MIB} MiB to parse "
            f"(at most {PARSE_BUDGET_BYTES // MIB} MiB)",
        )
    try:
        message = json.loads(line)
    except RecursionError:
        return refuse_head(line, f"it nests deeper than {MAX_DEPTH} levels")
    except ValueError:
        return Refusal(f"not JSON: {preview(line)}")
    if not isinstance(message, dict):
        return Refusal(f"not an object: {preview(line)}")
    if too_deep(message, MAX_DEPTH):
        return _refuse_parsed(message, f"it nests deeper than {MAX_DEPTH} levels")
    problem = envelope_problem(message)
    if problem is not None:
        return _refuse_parsed(message, f"{problem}: {preview(line)}")
    return message


def parse_cost(line: bytes) -> int:
    """An upper bound of the memory, in bytes, that parsing `line` takes: every value but the first of a container
    follows a comma, and every container starts with a bracket."""
    if len(line) < COST_CHECK_BYTES:
        return 0
    values = line.count(b",") + line.count(b"[") + line.count(b"{") + 1
    return values * BYTES_PER_VALUE + 2 * len(line)


def too_deep(value: Any, limit: int) -> bool:
    """Whether `value` nests containers more than `limit` levels; iterative, so any depth is safe to check."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def envelope_problem(message: dict[str, Any]) -> str | None:
    """What keeps `message` from being a JSON-RPC 2.0 request, notification or response the SDK can act on."""
    if message.get("jsonrpc") != "2.0":
        return 'no "jsonrpc": "2.0"'
    if "id" in message and not _valid_id(message["id"]):
        return "its id is neither a string, an integer nor null"
    if "method" in message:
        return None if isinstance(message["method"], str) else "its method is not a string"
    if "id" not in message:
        return "neither a request nor a response"
    if "error" in message and not isinstance(message["error"], dict):
        return "its error is not an object"
    if "error" not in message and "result" not in message:
        return "a response with neither result nor error"
    return None


def _refuse_parsed(message: dict[str, Any], reason: str) -> Refusal:
    rid = message.get("id")
    if not _valid_id(rid):
        return Refusal(reason)
    return Refusal(reason, rid, request="method" in message)


def refuse_head(line: bytes, reason: str) -> Refusal:
    """A refusal of a line that was not parsed: its id is read from its head when that is a JSON-RPC envelope."""
    match = _HEAD.match(line[:HEAD_BYTES])
    if match is None:
        return Refusal(reason)
    raw, kind = match.group(1), match.group(2)
    rid: JsonRpcId = raw[1:-1].decode("utf-8", "replace") if raw.startswith(b'"') else int(raw)
    return Refusal(reason, rid, request=kind == b"method")


def preview(line: bytes, limit: int = 200) -> str:
    """The head of a line, for a report: printable, and short whatever the line."""
    return repr(line[:limit].decode("utf-8", "replace")) + ("..." if len(line) > limit else "")


def error_response(rid: JsonRpcId, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def oversized(size: int, limit: int) -> str:
    """The reason a line longer than the transports' limit is refused."""
    return f"it is {size} bytes long, over the limit of {limit // MIB} MiB"
