"""The operator's liveness answer: a deaf watch fails it; an API server that refuses or hangs does not, since
restarting the operator would not bring the API back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import pytest

from agentsession.api.manifest import Key
from agentsession.controller.watch_health import WatchHealth, WatchStalled, liveness
from agentsession.kube.errors import KubeUnavailable, error_from_status


async def listed(version: str) -> Mapping[Key, str]:
    return {("ns", "a"): version}


async def refused() -> Mapping[Key, str]:
    raise KubeUnavailable(
        "list agentsessions in all namespaces failed: ClientConnectorError Connection refused"
    )


async def hangs() -> Mapping[Key, str]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_a_refused_listing_is_no_liveness_failure() -> None:
    answer = await liveness(WatchHealth(stall_seconds=30), refused(), now=0)
    assert answer == {
        "api": "unanswered, watch not checked: list agentsessions in all namespaces failed: "
        "ClientConnectorError Connection refused"
    }


async def test_an_api_error_is_no_liveness_failure() -> None:
    async def unavailable() -> Mapping[Key, str]:
        raise error_from_status("list agentsessions", 503, "ServiceUnavailable", "etcd is not ready")

    answer = await liveness(WatchHealth(stall_seconds=30), unavailable(), now=0)
    assert "etcd is not ready" in answer["api"]


async def test_a_hanging_listing_is_answered_within_the_bound() -> None:
    started = time.monotonic()
    answer = await liveness(WatchHealth(stall_seconds=30), hangs(), now=0, within=0.05)
    assert time.monotonic() - started < 2
    assert answer == {"api": "unanswered, watch not checked: no answer within 0s"}


async def test_a_deaf_watch_fails_liveness_once_the_api_answers_again() -> None:
    health = WatchHealth(stall_seconds=30)
    health.record(("ns", "a"), "5")
    assert await liveness(health, listed("5"), now=0) == {"sessions": 1}
    # The object changed and no watch event told: lagging from now on, while the API comes and goes.
    assert await liveness(health, listed("6"), now=10) == {"sessions": 1}
    assert "api" in await liveness(health, refused(), now=30)
    with pytest.raises(
        WatchStalled, match=r"1 object\(s\) changed with no watch event for over 30s \(ns/a\)"
    ):
        await liveness(health, listed("6"), now=41)
