"""The operator's side of the agentctl contract (agentsession.agentctl_api): the start call."""

from __future__ import annotations

import time

import aiohttp
from pydantic import ValidationError

from agentsession.agentctl_api import (
    START_PATH,
    STATUS_PATH,
    ErrorResponse,
    StartRequest,
    StartResponse,
    StatusResponse,
)
from agentsession.controller import metrics


class AgentctlError(RuntimeError):
    """agentctl could not be reached or refused the call; the message says which and why."""


class AgentctlClient:
    def __init__(self, timeout_seconds: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def start(self, endpoint: str, token: str, request: StartRequest) -> StartResponse:
        url = f"{endpoint.rstrip('/')}{START_PATH}"
        started = time.monotonic()
        outcome = "error"
        try:
            async with self._http().post(
                url,
                json=request.model_dump(exclude_none=True),
                headers={"Authorization": f"Bearer {token}"},
            ) as response:
                body = await response.text()
                if response.status != 200:
                    raise AgentctlError(
                        f"agentctl start at {url} answered HTTP {response.status}: {_error_text(body)}"
                    )
                try:
                    result = StartResponse.model_validate_json(body)
                except ValidationError as error:
                    raise AgentctlError(
                        f"agentctl start at {url} answered an unexpected body: {error}"
                    ) from error
                if not result.success:
                    raise AgentctlError(f"agentctl start at {url} reported failure: {body[:500]}")
                outcome = "ok"
                return result
        except (aiohttp.ClientError, TimeoutError) as error:
            raise AgentctlError(
                f"agentctl start at {url} failed: {type(error).__name__} {error}".rstrip()
            ) from error
        finally:
            metrics.AGENTCTL_CALL_SECONDS.labels(call="start", outcome=outcome).observe(
                time.monotonic() - started
            )

    async def status(self, endpoint: str, token: str) -> StatusResponse:
        url = f"{endpoint.rstrip('/')}{STATUS_PATH}"
        started = time.monotonic()
        outcome = "error"
        try:
            async with self._http().get(url, headers={"Authorization": f"Bearer {token}"}) as response:
                body = await response.text()
                if response.status != 200:
                    raise AgentctlError(
                        f"agentctl status at {url} answered HTTP {response.status}: {_error_text(body)}"
                    )
                result = StatusResponse.model_validate_json(body)
                outcome = "ok"
                return result
        except ValidationError as error:
            raise AgentctlError(f"agentctl status at {url} answered an unexpected body: {error}") from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise AgentctlError(
                f"agentctl status at {url} failed: {type(error).__name__} {error}".rstrip()
            ) from error
        finally:
            metrics.AGENTCTL_CALL_SECONDS.labels(call="status", outcome=outcome).observe(
                time.monotonic() - started
            )


def _error_text(body: str) -> str:
    try:
        error = ErrorResponse.model_validate_json(body)
    except ValidationError:
        return body[:500] or "(empty body)"
    return f"{error.error}: {error.message}"
