"""Signed requests to a real agentctl for tests that speak raw HTTP: the instance comes from its /health."""

from __future__ import annotations

import urllib.request

import aiohttp

from agentsession.contract.auth import INSTANCE_HEADER, authorization
from agentsession.contract.wire import HEALTH_PATH


def instance_of(base: str) -> str:
    with urllib.request.urlopen(base + HEALTH_PATH, timeout=10) as response:
        return str(response.headers[INSTANCE_HEADER])


async def instance_at(http: aiohttp.ClientSession, base: str) -> str:
    async with http.get(base + HEALTH_PATH) as response:
        return response.headers[INSTANCE_HEADER]


def signed(token: str, instance: str, method: str, path: str) -> dict[str, str]:
    """The Authorization header of one request to `path` (with its query, as sent); use it once."""
    return {"Authorization": authorization(token, instance, method, path)}


async def signed_for(
    http: aiohttp.ClientSession, base: str, token: str, method: str, path: str
) -> dict[str, str]:
    return signed(token, await instance_at(http, base), method, path)
