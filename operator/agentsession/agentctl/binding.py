"""Handlers bound to the route table of `agentsession.contract.routes`, and their registration on the app.

A handler names the route it serves; `register` adds exactly the table's routes and refuses to build an app
where a route has no handler or a handler serves no route of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler

from agentsession.contract.routes import ROUTES, Route

H = TypeVar("H", bound=Handler)


class RouteTableError(RuntimeError):
    """The handlers and the route table disagree; the message names the route."""


class Handlers:
    """The handlers of one module, each declared with the route it serves: `@handlers(STATUS)`."""

    def __init__(self) -> None:
        self.bound: list[tuple[Route, Handler]] = []

    def __call__(self, route: Route) -> Callable[[H], H]:
        def bind(handler: H) -> H:
            self.bound.append((route, handler))
            return handler

        return bind


def register(app: web.Application, tables: Iterable[Handlers]) -> None:
    handlers: dict[str, Handler] = {}
    for table in tables:
        for route, handler in table.bound:
            if route not in ROUTES:
                raise RouteTableError(
                    f"handler {handler.__name__} serves {route.name!r}, not a route of the table"
                )
            if route.name in handlers:
                raise RouteTableError(f"route {route.name!r} has two handlers")
            handlers[route.name] = handler
    missing = [route.name for route in ROUTES if route.name not in handlers]
    if missing:
        raise RouteTableError(f"no handler for the routes {', '.join(missing)}")
    for route in ROUTES:
        # GET routes answer HEAD too, as aiohttp's own route decorators make them.
        add = app.router.add_get if route.method == "GET" else app.router.add_post
        add(route.path, handlers[route.name])
