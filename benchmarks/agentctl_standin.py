"""A stand-in agentctl for scale benchmarks only: one process answering for every session of a run.

Pods on simulated (kwok) nodes run no containers, yet the operator starts ACP through agentctl, and the gateway
follows each agent's journal. With the operator's and the gateway's `agentctl_host_override` (and port) pointing
here, every session's agentctl is this process. It answers the routes its clients use (`agentsession.contract.routes`,
bodies from `agentsession.contract.wire`) with plausible replies: a session is known by the key id of the token its
requests are signed with (any well-formed signature is accepted; the stand-in knows no token), `start` is
idempotent per session, the agent is always idle, and the update stream stays open with nothing to say. The journal
is empty, or with `--journal-entries N --entry-bytes B` holds N made-up agent messages of about B bytes each (the
same for every session, made as they are asked for, never held), served in pages as agentctl pages its history
(`HISTORY_PAGE_ENTRIES` entries and `HISTORY_PAGE_BYTES` at most; `--page-entries` for fewer), so the gateway's
paging can be measured on a journal larger than the gateway's memory. `GET /standin/stats` counts the calls, for
the benchmark to check.

    python -m benchmarks.agentctl_standin --port 9999      # --host 127.0.0.1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import WSMsgType, web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ValidationError

from agentsession.api.acp import AgentIdentity, SessionMode
from agentsession.contract.auth import INSTANCE_HEADER, BadHeader, parse
from agentsession.contract.routes import (
    AGENT_HEALTH,
    DRAIN,
    HEALTH,
    HISTORY,
    PERMISSIONS,
    START,
    STATUS,
    UPDATES,
    Route,
)
from agentsession.contract.wire import (
    HISTORY_PAGE_BYTES,
    HISTORY_PAGE_ENTRIES,
    AcpActivity,
    DrainBody,
    DrainResponse,
    ErrorResponse,
    HistoryResponse,
    PermissionsResponse,
    StartRequest,
    StartResponse,
    StatusResponse,
)

STATS_PATH = "/standin/stats"
# One instance for every session: the stand-in never restarts within a run.
STANDIN_INSTANCE = "5ca1e"
JOURNAL_ID = "standin"
MODES = [SessionMode(id="ask", name="Ask"), SessionMode(id="code", name="Code")]
IDENTITY = AgentIdentity(name="agentctl-standin", title="Stand-in agentctl", version="0")
log = logging.getLogger("agentctl-standin")


def _json(model: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(model.model_dump(mode="json"), status=status)


def _error(status: int, code: str, message: str) -> web.Response:
    return _json(ErrorResponse(error=code, message=message), status)


def _session(request: web.Request) -> str:
    """The key id the request was signed with: one per token, so one per session; "" when unsigned."""
    try:
        return parse(request.headers.get("Authorization", "")).key_id
    except BadHeader:
        return ""


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Journal:
    """`entries` agent messages of about `entry_bytes` each; entry n says `n` in its first eight digits."""

    entries: int = 0
    entry_bytes: int = 0
    page_entries: int = HISTORY_PAGE_ENTRIES

    def entry(self, seq: int) -> str:
        text = f"{seq:08d}" + "x" * max(0, self.entry_bytes - 200)
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        entry = {"seq": seq, "timestamp": "2026-01-01T00:00:00.000Z", "kind": "session_update",
                 "notification": {"sessionId": "standin", "update": update}}  # fmt: skip
        return json.dumps(entry, separators=(",", ":"))

    def page(self, after: int, limit: int | None) -> str:
        """The answer to `GET /api/v1/history?after=&limit=`, as agentctl pages it, encoded."""
        most = min(limit or self.page_entries, self.page_entries, HISTORY_PAGE_ENTRIES)
        encoded: list[str] = []
        size = 0
        seq = max(after, 0)
        while seq < self.entries and len(encoded) < most:
            entry = self.entry(seq + 1)
            if encoded and size + len(entry) > HISTORY_PAGE_BYTES:
                break
            encoded.append(entry)
            size += len(entry)
            seq += 1
        more = seq if seq < self.entries else None
        tail = json.dumps({"last_seq": self.entries, "journal_id": JOURNAL_ID, "next": more})
        return '{"updates":[' + ",".join(encoded) + "]," + tail[1:]


class Standin:
    """Every session's agentctl at once: what was started (by token), the streams open, the calls counted."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal or Journal()
        self.calls: Counter[str] = Counter()
        self.started: dict[str, StartResponse] = {}
        self.streams: set[web.WebSocketResponse] = set()

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "timestamp": _now().isoformat()})

    async def start(self, request: web.Request) -> web.Response:
        try:
            body = StartRequest.model_validate_json(await request.text())
        except ValidationError as error:
            return _error(422, "validation_error", str(error))
        token = _session(request)
        answer = self.started.get(token)
        if answer is None:
            # The same token (one session) always gets the same ACP session: agentctl's start is idempotent.
            session_id = body.session_id or f"standin-{hashlib.sha256(token.encode()).hexdigest()[:16]}"
            answer = StartResponse(
                success=True,
                session_id=session_id,
                resumed=body.session_id is not None,
                prompt_sent=body.prompt is not None and body.session_id is None,
                current_mode_id=body.mode_id or MODES[0].id,
                available_modes=MODES,
                agent_info=IDENTITY,
            )
            self.started[token] = answer
        return _json(answer)

    async def status(self, request: web.Request) -> web.Response:
        started = self.started.get(_session(request))
        acp = AcpActivity(
            session_id=started.session_id if started else None,
            current_mode_id=started.current_mode_id if started else None,
        )
        return _json(
            StatusResponse(
                state="running",
                acp=acp,
                last_activity_at=_now(),
                last_seq=self.journal.entries,
                journal_id=JOURNAL_ID,
            )
        )

    async def drain(self, request: web.Request) -> web.Response:
        try:
            body = DrainBody.model_validate_json(await request.text())
        except ValidationError as error:
            return _error(422, "validation_error", str(error))
        answer = DrainResponse(
            outcome="idle", waited_seconds=0.0, timeout_seconds=body.timeout_seconds, cancelled_permissions=0
        )
        return _json(answer)

    async def history(self, request: web.Request) -> web.Response:
        try:
            after = int(request.query.get("after", "0"))
            limit = int(request.query["limit"]) if "limit" in request.query else None
        except ValueError:
            return _error(400, "bad_request", "after and limit are integers")
        if not self.journal.entries:
            return _json(HistoryResponse(updates=[], last_seq=0, journal_id=JOURNAL_ID))
        return web.Response(text=self.journal.page(after, limit), content_type="application/json")

    async def permissions(self, _: web.Request) -> web.Response:
        return _json(PermissionsResponse(pending=[]))

    async def updates(self, request: web.Request) -> web.WebSocketResponse:
        """An idle agent's journal: open until the client leaves, nothing in it."""
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.streams.add(ws)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.ERROR:
                    break
        finally:
            self.streams.discard(ws)
        return ws

    async def stats(self, _: web.Request) -> web.Response:
        return web.json_response(
            {"calls": dict(self.calls), "sessions": len(self.started), "open_streams": len(self.streams)}
        )

    async def close_streams(self, _: web.Application) -> None:
        for ws in list(self.streams):
            await ws.close()


def build_app(journal: Journal | None = None) -> web.Application:
    standin = Standin(journal)
    handlers: dict[Route, Handler] = {
        HEALTH: standin.health,
        AGENT_HEALTH: standin.health,
        START: standin.start,
        STATUS: standin.status,
        DRAIN: standin.drain,
        HISTORY: standin.history,
        PERMISSIONS: standin.permissions,
        UPDATES: standin.updates,
    }
    by_path = {route.path: route for route in handlers}

    @web.middleware
    async def count_and_check(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = by_path.get(request.path)
        if route is not None:
            standin.calls[route.name] += 1
            if route.auth and not _session(request):
                return _error(
                    401, "unauthorized", "a signed request is required (any token's signature is accepted)"
                )
        return await handler(request)

    async def announce(_: web.Request, response: web.StreamResponse) -> None:
        response.headers[INSTANCE_HEADER] = STANDIN_INSTANCE

    app = web.Application(middlewares=[count_and_check])
    app.on_response_prepare.append(announce)
    for route, handler in handlers.items():
        app.router.add_route(route.method, route.path, handler)
    app.router.add_get(STATS_PATH, standin.stats)
    app.on_shutdown.append(standin.close_streams)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--journal-entries", type=int, default=0, help="entries in every session's journal")
    parser.add_argument("--entry-bytes", type=int, default=1024, help="about how big each entry is")
    parser.add_argument(
        "--page-entries", type=int, default=HISTORY_PAGE_ENTRIES, help="most entries per page"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    web.run_app(
        build_app(Journal(args.journal_entries, args.entry_bytes, args.page_entries)),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        shutdown_timeout=2,
        backlog=4096,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
