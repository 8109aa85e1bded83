"""agentctl's routes exist once: the app serves, and the OpenAPI document describes, exactly the route table."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from agentsession.agentctl.app import create_app
from agentsession.agentctl.binding import Handlers, RouteTableError, register
from agentsession.agentctl.config import parse_config
from agentsession.agentctl.openapi import build_openapi
from agentsession.agentctl.services import SERVICES
from agentsession.contract.routes import HEALTH, ROUTES, STATUS, Route
from agentsession.contract.wire import TOKEN_ENV


async def test_the_app_and_the_document_have_exactly_the_routes_of_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "t")
    app = create_app(parse_config(["--workdir", str(tmp_path)]))
    try:
        served = {
            (route.method, route.resource.canonical)
            for route in app.router.routes()
            if route.method != "HEAD" and route.resource is not None
        }
    finally:
        await app[SERVICES].close()
    document = {(method.upper(), path) for path, item in build_openapi()["paths"].items() for method in item}
    table = {(route.method, route.path) for route in ROUTES}
    assert served == table
    assert document == table
    assert len(table) == len(ROUTES) == len({route.name for route in ROUTES})


async def _ok(request: web.Request) -> web.Response:
    return web.Response()


def _all_but(*left_out: Route) -> Handlers:
    handlers = Handlers()
    for route in ROUTES:
        if route not in left_out:
            handlers(route)(_ok)
    return handlers


def test_a_route_without_a_handler_stops_the_app() -> None:
    with pytest.raises(RouteTableError, match="no handler for the routes status"):
        register(web.Application(), [_all_but(STATUS)])


def test_a_handler_of_a_route_outside_the_table_stops_the_app() -> None:
    stray = Handlers()
    stray(Route("stray", "GET", "/api/v1/stray", "Not in the table"))(_ok)
    with pytest.raises(RouteTableError, match="'stray', not a route of the table"):
        register(web.Application(), [_all_but(), stray])


def test_two_handlers_of_one_route_stop_the_app() -> None:
    again = Handlers()
    again(HEALTH)(_ok)
    with pytest.raises(RouteTableError, match="'health' has two handlers"):
        register(web.Application(), [_all_but(), again])
