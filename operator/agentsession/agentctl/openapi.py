"""The OpenAPI 3.1 document of agentctl's API, generated from its route table and the models the routes name."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentsession.agentctl import __version__
from agentsession.contract.auth import INSTANCE_HEADER, SCHEME, VERSION, WINDOW_SECONDS
from agentsession.contract.routes import ROUTES, QueryParam, Route
from agentsession.contract.wire import ErrorResponse, JournalEntry

REF = "#/components/schemas/{model}"
SIGNATURE_SCHEME = {
    "type": "http",
    "scheme": SCHEME,
    "description": (
        f"`Authorization: {SCHEME} {VERSION} i=<instance>,k=<key id>,t=<unix seconds>,n=<nonce>,s=<signature>`: "
        f"`i` is the `{INSTANCE_HEADER}` header of any answer (GET /health gives one without authentication), "
        "`k` the first 16 hex digits of HMAC-SHA256(token, 'agentsession.dev/agentctl-key-id/v1'), `n` 16 to 32 "
        "random bytes in hex, never used twice, and `s` the hex HMAC-SHA256, keyed with the token, of the lines "
        f"'{SCHEME} {VERSION}', i, METHOD, path with query as sent, t, n (joined by newlines). `t` must be "
        f"within {WINDOW_SECONDS} s of agentctl's clock. The token itself is never sent."
    ),
}

_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": REF.format(model=model.__name__)}


def _content(
    schema: dict[str, Any], description: str, media_type: str = "application/json"
) -> dict[str, Any]:
    return {"description": description, "content": {media_type: {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _content(_ref(ErrorResponse), description)


def _parameter(param: QueryParam) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": param.type}
    if param.minimum is not None:
        schema["minimum"] = param.minimum
    spec: dict[str, Any] = {"name": param.name, "in": "query", "required": False, "schema": schema}
    if param.description:
        spec["description"] = param.description
    return spec


def _answer(route: Route) -> dict[str, Any]:
    if route.media_type != "application/json":
        return _content({"type": "string"}, "OK", route.media_type)
    return _content(_ref(route.answer) if route.answer else _OBJECT, "OK")


def _operation(route: Route) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": route.summary, "responses": {}}
    responses = op["responses"]
    if route.websocket:
        op["description"] = "WebSocket endpoint (HTTP Upgrade); a plain GET answers 426."
        responses["101"] = {"description": "Switching to the WebSocket protocol"}
        responses["426"] = _error("Not a WebSocket upgrade")
    else:
        responses["200"] = _answer(route)
    if route.accepted is not None:
        responses["202"] = _content(_ref(route.accepted), "Accepted; the work goes on")
    if route.body is not None:
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": _ref(route.body)}}}
        responses["400"] = _error("Malformed JSON")
        responses["413"] = _error("Body over the size limit")
        responses["422"] = _error("Body does not match the schema")
    if route.query:
        op["parameters"] = [_parameter(p) for p in route.query]
        responses.setdefault("400", _error("Bad query parameter"))
    if route.auth:
        responses["401"] = _error("Missing, wrong, stale or replayed signature")
        responses["429"] = _error("Too many signed requests within the signature window")
    else:
        op["security"] = []
    for status, text in route.errors.items():
        responses[str(status)] = _error(text)
    return op


def _models() -> list[type[BaseModel]]:
    """Every model a route names, plus the error body and the stream's frame, each once, in table order."""
    found: dict[str, type[BaseModel]] = {ErrorResponse.__name__: ErrorResponse}
    for route in ROUTES:
        for model in (route.body, route.answer, route.accepted):
            if model is not None:
                found.setdefault(model.__name__, model)
    found.setdefault(JournalEntry.__name__, JournalEntry)
    return list(found.values())


def build_openapi() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in _models():
        schema = model.model_json_schema(ref_template=REF, by_alias=True)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentctl",
            "version": __version__,
            "description": "Control plane sidecar of one ACP agent.",
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"signature": SIGNATURE_SCHEME},
        },
        "security": [{"signature": []}],
        "paths": paths,
    }
