"""The gateway's task-session.v1 dialect: a WebSocket opened with the target's token, requests answered by id,
notifications put in an inbox in the order they came (with stdin and signals, see `terminal`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agentsession.kubectl_plugin.credentials import Target, check_transport
from agentsession.kubectl_plugin.discovery import gateway_url, gateway_ws_url
from agentsession.kubectl_plugin.errors import GatewayError, PluginError
from agentsession.kubectl_plugin.names import TASK_DIALECT

# The largest message taken from the gateway: a page of history holds up to 4 MiB of entries.
MAX_FRAME = 16 * 1024 * 1024


def bearer_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def ws_connect(
    http: aiohttp.ClientSession, url: str, token: str | None, dialect: str
) -> aiohttp.ClientWebSocketResponse:
    """A WebSocket to the gateway; a refusal (401, 403, 503) becomes a PluginError with the gateway's reason."""
    headers = bearer_headers(token)
    try:
        return await http.ws_connect(
            url, protocols=[dialect], headers=headers, heartbeat=20, max_msg_size=MAX_FRAME
        )
    except aiohttp.WSServerHandshakeError as exc:
        # The gateway refuses before the upgrade with a JSON body; a plain GET with the same token reads it.
        reason = exc.message
        with contextlib.suppress(aiohttp.ClientError, OSError, ValueError):
            async with http.get(url.replace("ws", "http", 1), headers=headers) as resp:
                reason = (await resp.json(content_type=None)).get("message", reason)
        hint = ""
        if exc.status == 401 and not token:
            hint = "; the gateway needs a token: give --service-account NAME or --token"
        raise PluginError(
            f"the gateway at {url} refused the connection ({exc.status}): {reason}{hint}"
        ) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise PluginError(f"cannot reach the gateway at {url}: {exc}") from exc


# ("notification", frame) | ("closed", reason) | ("input", text, or None at its end) | ("interrupt", count)
Event = tuple[str, Any]


class TaskClient:
    """Requests answered by id; notifications go to the inbox in the order they came, with stdin and signals."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, inbox: asyncio.Queue[Event]) -> None:
        self.ws = ws
        self.inbox = inbox
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def request(self, action: str, /, *, ident: str | None = None, **payload: Any) -> dict[str, Any]:
        """The answer's payload; `ident` is the request's id (default: a new one)."""
        request_id = ident or uuid.uuid4().hex
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        try:
            await self.ws.send_json(
                {"id": request_id, "type": "request", "action": action, "payload": payload}
            )
            return await answer
        finally:
            self._waiting.pop(request_id, None)

    async def _read(self) -> None:
        reason = "the gateway closed the connection"
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                answer = self._waiting.get(str(frame.get("id")))
                if frame.get("type") == "response" and answer is not None:
                    answer.set_result(frame.get("payload") or {})
                elif frame.get("type") == "error" and answer is not None:
                    error = frame.get("payload") or {}
                    answer.set_exception(
                        GatewayError(
                            str(frame.get("action")), str(error.get("code")), str(error.get("message"))
                        )
                    )
                elif frame.get("type") == "notification":
                    self.inbox.put_nowait(("notification", frame))
                elif frame.get("type") == "error":
                    # An error of no request: why the gateway is ending the connection (a token revoked or expired).
                    error = frame.get("payload") or {}
                    reason = f"the gateway ended the connection: {error.get('code')}: {error.get('message')}"
            if self.ws.close_code not in (None, aiohttp.WSCloseCode.OK):
                reason += f" (code {self.ws.close_code})"
        finally:
            for answer in self._waiting.values():
                if not answer.done():
                    answer.set_exception(PluginError(reason))
            self.inbox.put_nowait(("closed", reason))

    async def close(self) -> None:
        self._reader.cancel()
        await self.ws.close()


def history_page(notification: dict[str, Any], request_id: str) -> dict[str, Any] | None:
    """The payload of a `task.history` notification that goes on with the history `task.start` `request_id`
    answered with (`updates`, and `next`: null on the last page); None for any other notification."""
    payload = notification.get("payload") or {}
    if notification.get("action") != "task.history" or payload.get("request_id") != request_id:
        return None
    return dict(payload)


async def start_task(client: TaskClient, agent_id: str) -> tuple[dict[str, Any], str]:
    """`task.start`: its answer (the session's info and the first page of its history) and the request's id,
    which the following pages name."""
    request_id = uuid.uuid4().hex
    return await client.request("task.start", ident=request_id, task_id=agent_id), request_id


@contextlib.asynccontextmanager
async def open_session(target: Target, inbox: asyncio.Queue[Event]) -> AsyncIterator[TaskClient]:
    if target.gateway:
        check_transport(gateway_ws_url(target.gateway), target.insecure)
    token = await asyncio.to_thread(target.resolve_token)
    async with gateway_url(target) as url, aiohttp.ClientSession() as http:
        client = TaskClient(await ws_connect(http, url, token, TASK_DIALECT), inbox)
        try:
            yield client
        finally:
            await client.close()
