"""Request parsing shared by the handlers: every failure becomes an ApiError with a specific message."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from agentsession.agentctl.errors import ApiError

M = TypeVar("M", bound=BaseModel)

# JSON nested deeper than this is bad input, like JSON that does not parse: no body of the API nests a tenth as
# deep, and the parser, pydantic's serializer and the encoder each fail somewhere deeper (RecursionError, or a
# ValueError far from the parse), each of which would otherwise be a 500.
BODY_DEPTH_MAX = 64
NESTED_TOO_DEEP = f"JSON is nested too deeply (more than {BODY_DEPTH_MAX} levels); send a flatter document"


def nested_too_deeply(value: Any) -> bool:
    """Whether `value` nests arrays and objects more than BODY_DEPTH_MAX levels deep (found without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > BODY_DEPTH_MAX:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def describe_validation(exc: ValidationError) -> tuple[str, list[dict[str, Any]]]:
    errors = [
        {"field": ".".join(str(p) for p in e["loc"]) or "(body)", "message": e["msg"], "type": e["type"]}
        for e in exc.errors()
    ]
    text = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return text, errors


async def parse_body(request: web.Request, model: type[M]) -> M:
    raw = await request.read()
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = json.loads(raw)
        except UnicodeDecodeError:
            raise ApiError(400, "invalid_json", "request body is not UTF-8 text") from None
        except ValueError as exc:
            raise ApiError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise ApiError(400, "invalid_json", NESTED_TOO_DEEP) from None
        if nested_too_deeply(data):
            raise ApiError(400, "invalid_json", NESTED_TOO_DEEP)
    if not isinstance(data, dict):
        raise ApiError(
            422, "validation_error", f"request body must be a JSON object, got {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        text, errors = describe_validation(exc)
        raise ApiError(422, "validation_error", f"invalid request body: {text}", errors=errors) from None


def query_int(request: web.Request, name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(
            400, "bad_request", f"query parameter {name!r} must be an integer, got {raw!r}"
        ) from None
    if value < minimum:
        raise ApiError(400, "bad_request", f"query parameter {name!r} must be >= {minimum}")
    return value


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def json_ok(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=dumps)
