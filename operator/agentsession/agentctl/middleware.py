"""Errors in one JSON shape, signed-request auth, request size limit, request metrics."""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from agentsession.agentctl.authentication import Verifier
from agentsession.agentctl.errors import ApiError
from agentsession.agentctl.http_common import dumps
from agentsession.agentctl.metrics import Metrics
from agentsession.contract.auth import INSTANCE_HEADER, SCHEME
from agentsession.contract.routes import ROUTES
from agentsession.contract.wire import ErrorResponse

log = logging.getLogger(__name__)


OPEN_PATHS = frozenset(route.path for route in ROUTES if not route.auth)  # the kubelet's probes
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    426: "upgrade_required",
    429: "too_many_requests",
}


def error_response(status: int, code: str, message: str, **details: object) -> web.Response:
    body = ErrorResponse(error=code, message=message, **details).model_dump(exclude_none=True)
    resp = web.json_response(body, status=status, dumps=dumps)
    if status == 401:
        resp.headers["WWW-Authenticate"] = f'{SCHEME} realm="agentctl"'
    return resp


def _http_message(request: web.Request, exc: web.HTTPException, max_body: int) -> str:
    if exc.status == 404:
        return f"no route {request.method} {request.path}; the API is described at /api/v1/openapi.json"
    if exc.status == 405:
        allowed = ", ".join(sorted(getattr(exc, "allowed_methods", ()) or ()))
        return f"method {request.method} is not allowed on {request.path}" + (
            f"; use {allowed}" if allowed else ""
        )
    if exc.status == 413:
        return f"request body is larger than the limit of {max_body} bytes"
    return exc.text or exc.reason


def make_middlewares(verifier: Verifier | None, max_body: int, metrics: Metrics) -> list[web.middleware]:  # type: ignore[valid-type]
    """`verifier` None serves without authentication (--no-auth, local development only)."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = (
            request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        )
        try:
            resp = await handler(request)
        except ApiError as exc:
            resp = error_response(exc.status, exc.code, exc.message, **exc.details)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = _HTTP_CODES.get(exc.status, "error")
            resp = error_response(exc.status, code, _http_message(request, exc, max_body))
        except Exception:
            log.exception("unhandled error", extra={"path": request.path, "method": request.method})
            metrics.errors.labels("internal").inc()
            resp = error_response(500, "internal_error", "agentctl failed to handle the request; see its log")
        metrics.http_requests.labels(request.method, route, str(resp.status)).inc()
        return resp

    @web.middleware
    async def limits(request: web.Request, handler: Handler) -> web.StreamResponse:
        length = request.content_length
        if length is not None and length > max_body:
            raise ApiError(
                413, "payload_too_large", f"request body of {length} bytes exceeds the limit of {max_body}"
            )
        return await handler(request)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if verifier is not None and request.path not in OPEN_PATHS:
            # raw_path: the path and query exactly as the client sent and signed them.
            verifier.check(request.headers.get("Authorization"), request.method, request.raw_path)
        return await handler(request)

    return [errors, auth, limits]


def announce_instance(app: web.Application, verifier: Verifier) -> None:
    """Every answer, WebSocket handshakes and refusals included, names this agentctl's instance: what clients
    sign for."""

    async def on_prepare(_: web.Request, response: web.StreamResponse) -> None:
        response.headers[INSTANCE_HEADER] = verifier.instance

    app.on_response_prepare.append(on_prepare)
