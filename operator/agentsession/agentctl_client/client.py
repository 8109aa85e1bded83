"""agentctl's API as its clients (the operator, the gateway) call it: typed calls, typed streams, one error.

Paths, methods and query names come from the route table (`agentsession.contract.routes`) and answers are
parsed into the contract's models (`agentsession.contract.wire`), so this client and the server cannot drift.
Callers depend on the `AgentctlApi` protocol; `testing.fake_agentctl.FakeAgentctl` implements it in memory for
unit tests.

What answers is not trusted to be small: agentctl's image may be the tenant's. Every answer is read up to a cap
of its call and every frame up to a cap of its stream; beyond it the call fails with TOO_LARGE, having held no
more than the cap.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, TypeVar
from urllib.parse import urlencode

import aiohttp
from pydantic import BaseModel, ValidationError

from agentsession.agentctl_client.signing import Instances, Signer
from agentsession.contract.routes import (
    CANCEL,
    DRAIN,
    HISTORY,
    MODE,
    PERMISSION_RESPOND,
    PERMISSIONS,
    PROMPT,
    SHELL_BUFFER,
    SHELL_STATUS,
    SHELL_STREAM,
    START,
    STATUS,
    UPDATES,
    Route,
)
from agentsession.contract.wire import (
    ENTRY_MAX_BYTES,
    HISTORY_PAGE_BYTES,
    CancelBody,
    CancelResponse,
    DrainBody,
    DrainResponse,
    ErrorResponse,
    HistoryResponse,
    JournalEntry,
    ModeBody,
    ModeResponse,
    PermissionRespondBody,
    PermissionRespondResponse,
    PermissionsResponse,
    PromptAccepted,
    PromptBody,
    ShellBufferResponse,
    ShellFrame,
    ShellStatusResponse,
    StartRequest,
    StartResponse,
    StatusResponse,
)

# Error codes of failures agentctl did not describe itself.
UNREACHABLE = "unreachable"
BAD_ANSWER = "bad_answer"
UPGRADE_REFUSED = "upgrade_refused"  # a WebSocket upgrade answered with an HTTP error (its body is not read)
TOO_LARGE = "too_large"  # an answer or a frame over the cap of its call

HEARTBEAT_SECONDS = 15.0
STREAM_STATUS = 101  # the status of an upgraded connection, for errors in its frames

# Caps on what one call may answer, in bytes. A history page is HISTORY_PAGE_BYTES of entries and their envelope;
# pending permissions carry the agent's tool calls as it sent them, so they get a page's cap too.
ANSWER_MAX_BYTES = 1024 * 1024
HISTORY_ANSWER_MAX_BYTES = HISTORY_PAGE_BYTES + 1024 * 1024
PERMISSIONS_ANSWER_MAX_BYTES = HISTORY_ANSWER_MAX_BYTES
# Caps on one frame: an update is one journal entry (at most ENTRY_MAX_BYTES); shell output comes in pieces of
# 64 KiB at most, 6 times that once escaped as JSON.
FRAME_MARGIN_BYTES = 4096
UPDATE_FRAME_MAX = ENTRY_MAX_BYTES + FRAME_MARGIN_BYTES
SHELL_FRAME_MAX = 1024 * 1024
READ_PIECE_BYTES = 64 * 1024

M = TypeVar("M", bound=BaseModel)
# Beyond a drain's timeout: agentctl's cancel grace and the answer's way back.
DRAIN_ANSWER_MARGIN_SECONDS = 10.0


class AgentctlError(RuntimeError):
    """A call agentctl could not be reached for, refused, or answered outside its contract.

    `status` is the HTTP status (None when agentctl was not reached); `code` is agentctl's error code from its
    ErrorResponse, else UNREACHABLE, BAD_ANSWER, UPGRADE_REFUSED or TOO_LARGE; `detail` is agentctl's own
    message, or what went wrong on the way. The message names the call, the URL and why.
    """

    def __init__(
        self,
        call: str,
        endpoint: str,
        detail: str,
        *,
        path: str = "",
        status: int | None = None,
        code: str = UNREACHABLE,
    ) -> None:
        self.call = call
        self.endpoint = endpoint
        self.url = endpoint + path
        self.status = status
        self.code = code
        self.detail = detail
        if status is None:
            why = f"failed: {detail}"
        elif status >= 400:
            why = f"answered HTTP {status}: " + ("" if code == BAD_ANSWER else f"{code}: ") + detail
        else:
            why = f"answered an unexpected body: {detail}"
        super().__init__(f"agentctl {call} at {self.url} {why}")


class ShellChannel(Protocol):
    """An open shell stream: the frames agentctl sends (output, exit, error, pong) and input to the shell."""

    def frames(self) -> AsyncIterator[ShellFrame]: ...

    async def send_input(self, data: str) -> None: ...


class AgentctlApi(Protocol):
    """The calls and streams of one agentctl; every failure is an AgentctlError."""

    @property
    def endpoint(self) -> str: ...

    async def start(self, request: StartRequest) -> StartResponse:
        """Raises AgentctlError also when agentctl answers `success: false`."""

    async def status(self) -> StatusResponse: ...

    async def history(self, after: int = 0, limit: int | None = None) -> HistoryResponse:
        """One page of the entries with seq > after (at most `limit`, HISTORY_PAGE_ENTRIES, and
        HISTORY_PAGE_BYTES of them); while `next` is not None, the following page is `history(next)`."""

    async def prompt(self, text: str) -> PromptAccepted:
        """Starts a turn and returns at once; the turn's entries come on `updates`."""

    async def set_mode(self, mode_id: str) -> ModeResponse: ...

    async def cancel(self) -> CancelResponse: ...

    async def drain(self, timeout_seconds: float) -> DrainResponse:
        """Lets a running turn finish up to the timeout, then cancels it; answers how the turn ended."""

    async def permissions(self) -> PermissionsResponse: ...

    async def respond_permission(
        self, pending_id: str, option_id: str | None = None, cancelled: bool = False
    ) -> PermissionRespondResponse: ...

    async def shell_status(self) -> ShellStatusResponse: ...

    async def shell_buffer(self) -> ShellBufferResponse: ...

    def updates(self, after: int) -> AbstractAsyncContextManager[AsyncIterator[JournalEntry]]:
        """The journal entries with seq > after, then live ones; the iterator ends when agentctl closes it."""

    def shell(self) -> AbstractAsyncContextManager[ShellChannel]: ...


# (endpoint, token) -> the API of the agentctl there.
AgentctlConnector = Callable[[str, str], AgentctlApi]
CallObserver = Callable[[str, str, float], None]  # (call, "ok" | "error", seconds)


def _failure(error: BaseException) -> str:
    return f"{type(error).__name__} {error}".rstrip()


def _body(model: BaseModel) -> dict[str, object]:
    return model.model_dump(mode="json", exclude_defaults=True)


class AgentctlClient:
    """AgentctlApi over HTTP and WebSocket, on the caller's aiohttp session."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        endpoint: str,
        token: str,
        *,
        timeout: float = 30.0,
        on_call: CallObserver | None = None,
        instances: Instances | None = None,
    ) -> None:
        self._http = http
        self.endpoint = endpoint.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        # Requests are signed, never carry the token: see agentsession.contract.auth.
        self._signer = Signer(http, self.endpoint, token, instances or Instances(), self._timeout)
        self._on_call = on_call

    async def start(self, request: StartRequest) -> StartResponse:
        answer = await self._call(START, StartResponse, _body(request))
        if not answer.success:
            raise AgentctlError(
                START.name,
                self.endpoint,
                f"success is false: {answer.model_dump_json()[:500]}",
                path=START.path,
                status=200,
                code=BAD_ANSWER,
            )
        return answer

    async def status(self) -> StatusResponse:
        return await self._call(STATUS, StatusResponse)

    async def history(self, after: int = 0, limit: int | None = None) -> HistoryResponse:
        if limit is None:
            return await self._call(HISTORY, HistoryResponse, cap=HISTORY_ANSWER_MAX_BYTES, after=after)
        return await self._call(
            HISTORY, HistoryResponse, cap=HISTORY_ANSWER_MAX_BYTES, after=after, limit=limit
        )

    # The bodies below are not validated here: agentctl's 422 says what is wrong in its own words, which
    # callers relay to whoever sent the value.

    async def prompt(self, text: str) -> PromptAccepted:
        body = _body(PromptBody.model_construct(prompt=text))
        return await self._call(PROMPT, PromptAccepted, body, wait="false")

    async def set_mode(self, mode_id: str) -> ModeResponse:
        return await self._call(MODE, ModeResponse, _body(ModeBody.model_construct(mode_id=mode_id)))

    async def cancel(self) -> CancelResponse:
        return await self._call(CANCEL, CancelResponse, _body(CancelBody.model_construct()))

    async def drain(self, timeout_seconds: float) -> DrainResponse:
        # The answer comes when the turn has ended or been cancelled: allow for the whole drain.
        wait = aiohttp.ClientTimeout(total=timeout_seconds + DRAIN_ANSWER_MARGIN_SECONDS)
        body = _body(DrainBody.model_construct(timeout_seconds=timeout_seconds))
        return await self._call(DRAIN, DrainResponse, body, within=wait)

    async def permissions(self) -> PermissionsResponse:
        return await self._call(PERMISSIONS, PermissionsResponse, cap=PERMISSIONS_ANSWER_MAX_BYTES)

    async def respond_permission(
        self, pending_id: str, option_id: str | None = None, cancelled: bool = False
    ) -> PermissionRespondResponse:
        body = PermissionRespondBody.model_construct(
            pending_id=pending_id, option_id=option_id, cancelled=cancelled
        )
        return await self._call(PERMISSION_RESPOND, PermissionRespondResponse, _body(body))

    async def shell_status(self) -> ShellStatusResponse:
        return await self._call(SHELL_STATUS, ShellStatusResponse)

    async def shell_buffer(self) -> ShellBufferResponse:
        return await self._call(SHELL_BUFFER, ShellBufferResponse)

    @asynccontextmanager
    async def updates(self, after: int) -> AsyncIterator[AsyncIterator[JournalEntry]]:
        async with self._socket(UPDATES, UPDATE_FRAME_MAX, after=after) as ws:
            yield _frames(ws, UPDATES, self.endpoint, JournalEntry, UPDATE_FRAME_MAX)

    @asynccontextmanager
    async def shell(self) -> AsyncIterator[ShellChannel]:
        async with self._socket(SHELL_STREAM, SHELL_FRAME_MAX) as ws:
            yield _Shell(ws, self.endpoint)

    def _path(self, route: Route, query: dict[str, str | int]) -> str:
        unknown = set(query) - {param.name for param in route.query}
        if unknown:
            raise ValueError(f"{route.name} has no query parameter {', '.join(sorted(unknown))}")
        return route.path + (f"?{urlencode(query)}" if query else "")

    async def _call(
        self,
        route: Route,
        answer: type[M],
        body: dict[str, object] | None = None,
        *,
        within: aiohttp.ClientTimeout | None = None,
        cap: int = ANSWER_MAX_BYTES,
        **query: str | int,
    ) -> M:
        path = self._path(route, query)
        started = time.monotonic()
        outcome = "error"
        try:
            try:
                status, raw, renewed = await self._send(
                    route.method, path, body, within or self._timeout, cap
                )
                if renewed:
                    status, raw, _ = await self._send(route.method, path, body, within or self._timeout, cap)
            except (aiohttp.ClientError, TimeoutError) as error:
                raise AgentctlError(route.name, self.endpoint, _failure(error), path=path) from error
            if raw is None:
                raise AgentctlError(
                    route.name,
                    self.endpoint,
                    f"the answer is larger than the limit of {cap} bytes for this call",
                    path=path,
                    status=status,
                    code=TOO_LARGE,
                )
            text = raw.decode(errors="replace")
            if not 200 <= status < 300:
                raise self._refusal(route, path, status, text)
            try:
                result = answer.model_validate_json(text)
            except ValidationError as error:
                raise AgentctlError(
                    route.name, self.endpoint, str(error), path=path, status=status, code=BAD_ANSWER
                ) from error
            outcome = "ok"
            return result
        finally:
            if self._on_call is not None:
                self._on_call(route.name, outcome, time.monotonic() - started)

    async def _send(
        self,
        method: str,
        path: str,
        body: dict[str, object] | None,
        within: aiohttp.ClientTimeout,
        cap: int,
    ) -> tuple[int, bytes | None, bool]:
        """(status, body or None when it is over `cap`, whether agentctl refused it as another instance than the
        one signed for)."""
        url = self.endpoint + path
        headers = await self._signer.headers(method, url)
        async with self._http.request(method, url, json=body, headers=headers, timeout=within) as response:
            status, raw = response.status, await _read_capped(response, cap)
            return status, raw, self._signer.renewed(status, response.headers)

    def _refusal(self, route: Route, path: str, status: int, text: str) -> AgentctlError:
        try:
            error = ErrorResponse.model_validate_json(text)
        except ValidationError:
            return AgentctlError(
                route.name,
                self.endpoint,
                text[:500] or "(empty body)",
                path=path,
                status=status,
                code=BAD_ANSWER,
            )
        return AgentctlError(
            route.name, self.endpoint, error.message, path=path, status=status, code=error.error
        )

    @asynccontextmanager
    async def _socket(
        self, route: Route, max_frame: int, **query: str | int
    ) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
        path = self._path(route, query)
        url = "ws" + self.endpoint.removeprefix("http") + path
        try:
            try:
                ws = await self._connect(url, max_frame)
            except aiohttp.WSServerHandshakeError as error:
                if not self._signer.renewed(error.status, error.headers):
                    raise
                ws = await self._connect(url, max_frame)
        except aiohttp.WSServerHandshakeError as error:
            raise AgentctlError(
                route.name, self.endpoint, error.message, path=path, status=error.status, code=UPGRADE_REFUSED
            ) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise AgentctlError(route.name, self.endpoint, _failure(error), path=path) from error
        async with ws:
            yield ws

    async def _connect(self, url: str, max_frame: int) -> aiohttp.ClientWebSocketResponse:
        headers = await self._signer.headers("GET", url)
        return await self._http.ws_connect(
            url, headers=headers, heartbeat=HEARTBEAT_SECONDS, max_msg_size=max_frame
        )


async def _read_capped(response: aiohttp.ClientResponse, cap: int) -> bytes | None:
    """The body, or None as soon as it proves longer than `cap` (by its Content-Length, or as it is read)."""
    if response.content_length is not None and response.content_length > cap:
        return None
    body = bytearray()
    async for piece in response.content.iter_chunked(READ_PIECE_BYTES):
        body += piece
        if len(body) > cap:
            return None
    return bytes(body)


def _too_big(error: object) -> bool:
    return isinstance(error, aiohttp.WebSocketError) and error.code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG


async def _frames(
    ws: aiohttp.ClientWebSocketResponse, route: Route, endpoint: str, model: type[M], max_frame: int
) -> AsyncIterator[M]:
    async for message in ws:
        if message.type == aiohttp.WSMsgType.ERROR and _too_big(message.data):
            raise AgentctlError(
                route.name,
                endpoint,
                f"a frame is larger than the limit of {max_frame} bytes for this stream",
                path=route.path,
                status=STREAM_STATUS,
                code=TOO_LARGE,
            )
        if message.type != aiohttp.WSMsgType.TEXT:
            return  # closed or broken: the stream is over, and its caller decides whether to reopen it
        try:
            frame = model.model_validate_json(message.data)
        except ValidationError as error:
            raise AgentctlError(
                route.name,
                endpoint,
                f"frame {message.data[:200]!r}: {error}",
                path=route.path,
                status=STREAM_STATUS,
                code=BAD_ANSWER,
            ) from error
        yield frame


class _Shell:
    """ShellChannel over an open `WS /api/v1/shell/stream`."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, endpoint: str) -> None:
        self._ws = ws
        self._endpoint = endpoint

    def frames(self) -> AsyncIterator[ShellFrame]:
        return _frames(self._ws, SHELL_STREAM, self._endpoint, ShellFrame, SHELL_FRAME_MAX)

    async def send_input(self, data: str) -> None:
        try:
            if self._ws.closed:
                raise ConnectionResetError("the shell stream is closed")
            await self._ws.send_str(json.dumps({"type": "input", "data": data}))
        except (aiohttp.ClientError, ConnectionError) as error:
            raise AgentctlError(
                SHELL_STREAM.name, self._endpoint, _failure(error), path=SHELL_STREAM.path
            ) from error


def http_connector(
    http: aiohttp.ClientSession, *, timeout: float = 30.0, on_call: CallObserver | None = None
) -> AgentctlConnector:
    """The connector of real agentctls: a client per (endpoint, token), all on one aiohttp session, which share
    what each agentctl said its instance is."""
    instances = Instances()

    def connect(endpoint: str, token: str) -> AgentctlApi:
        return AgentctlClient(http, endpoint, token, timeout=timeout, on_call=on_call, instances=instances)

    return connect
