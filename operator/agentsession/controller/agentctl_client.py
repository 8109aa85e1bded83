"""The operator's side of the agentctl contract (agentsession.agentctl_api): the start call."""

from __future__ import annotations

import time
from typing import Any, TypeVar

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

Answer = TypeVar("Answer", StartResponse, StatusResponse)


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
        result = await self._call(
            "start", "POST", endpoint, START_PATH, token, StartResponse, request.model_dump(exclude_none=True)
        )
        if not result.success:
            raise AgentctlError(
                f"agentctl start at {endpoint} reported failure: {result.model_dump_json()[:500]}"
            )
        return result

    async def status(self, endpoint: str, token: str) -> StatusResponse:
        return await self._call("status", "GET", endpoint, STATUS_PATH, token, StatusResponse)

    async def _call(
        self,
        call: str,
        method: str,
        endpoint: str,
        path: str,
        token: str,
        answer: type[Answer],
        body: dict[str, Any] | None = None,
    ) -> Answer:
        """One authenticated call; every failure becomes an AgentctlError naming the call, the URL and why."""
        url = f"{endpoint.rstrip('/')}{path}"
        started = time.monotonic()
        outcome = "error"
        try:
            async with self._http().request(
                method, url, json=body, headers={"Authorization": f"Bearer {token}"}
            ) as response:
                text = await response.text()
                if response.status != 200:
                    raise AgentctlError(
                        f"agentctl {call} at {url} answered HTTP {response.status}: {_error_text(text)}"
                    )
                result = answer.model_validate_json(text)
                outcome = "ok"
                return result
        except ValidationError as error:
            raise AgentctlError(f"agentctl {call} at {url} answered an unexpected body: {error}") from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise AgentctlError(
                f"agentctl {call} at {url} failed: {type(error).__name__} {error}".rstrip()
            ) from error
        finally:
            metrics.AGENTCTL_CALL_SECONDS.labels(call=call, outcome=outcome).observe(
                time.monotonic() - started
            )


def _error_text(body: str) -> str:
    try:
        error = ErrorResponse.model_validate_json(body)
    except ValidationError:
        return body[:500] or "(empty body)"
    return f"{error.error}: {error.message}"
