"""The stub's aiohttp application: the model APIs, `/healthz`, and `/requests` (what it received)."""

from __future__ import annotations

from aiohttp import web

from agentsession.model_stub import anthropic_api, gemini_api, openai_api
from agentsession.model_stub.recorder import Recorder

RECORDER = web.AppKey("recorder", Recorder)
# Claude Code sends its whole system prompt and tool definitions on every turn: well over aiohttp's 1 MiB default
# once a conversation grows.
MAX_BODY_BYTES = 64 * 1024 * 1024


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def list_requests(request: web.Request) -> web.Response:
    return web.json_response(request.app[RECORDER].as_json())


async def clear_requests(request: web.Request) -> web.Response:
    request.app[RECORDER].clear()
    return web.json_response({"cleared": True})


def create_app() -> web.Application:
    recorder = Recorder()
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[RECORDER] = recorder
    app.add_routes(
        [
            web.get("/healthz", healthz),
            web.get("/requests", list_requests),
            web.delete("/requests", clear_requests),
            *anthropic_api.routes(recorder),
            *openai_api.routes(recorder),
            *gemini_api.routes(recorder),
        ]
    )
    return app
