"""The egress proxy's ledger against an in-memory API server: status.usage written with a resourceVersion
precondition, totals carried on from the status, two proxies adding up, conflicts retried."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from agentsession.api.egress import Usage
from agentsession.api.manifest import Manifest
from agentsession.egress_proxy.directory import SessionInfo, session_info
from agentsession.egress_proxy.ledger import Ledger, latest
from agentsession.egress_proxy.prices import Tokens
from agentsession.kube.resources import AGENT_SESSIONS
from agentsession.testing.fake_kube import FakeKube

NS, NAME = "team", "s1"


def _session(usage: dict[str, Any] | None = None) -> Manifest:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"namespace": NS, "name": NAME, "uid": "uid-1"},
        "spec": {"agent": {"type": "claude-code"}},
        "status": {"phase": "Ready", **({"usage": usage} if usage else {})},
    }


def _stored(kube: FakeKube) -> Manifest:
    found = kube.find("AgentSession", NS, NAME)
    assert found is not None
    return found


def _info(kube: FakeKube) -> SessionInfo:
    return session_info(_stored(kube))


def _usage(kube: FakeKube) -> dict[str, Any]:
    usage: dict[str, Any] = _stored(kube)["status"]["usage"]
    return usage


def _call(ledger: Ledger, info: SessionInfo, tokens: Tokens, cost: str) -> None:
    ledger.count_request(info)
    ledger.add(info, tokens, Decimal(cost))


async def test_usage_is_written_on_top_of_the_status_and_counts_before_it_is_written() -> None:
    kube = FakeKube()
    kube.put(_session({"inputTokens": 100, "outputTokens": 10, "requests": 4, "costUSD": "0.5"}))
    ledger = Ledger(kube)
    info = _info(kube)
    _call(ledger, info, Tokens(input=20, output=5, cached=7), "0.000125")
    # Budgets see it at once.
    assert ledger.usage(info).model_dump(exclude={"updatedTime"}) == {
        "inputTokens": 120, "outputTokens": 15, "cachedTokens": 7, "requests": 5, "costUSD": "0.500125"
    }  # fmt: skip
    await ledger.flush()
    usage = _usage(kube)
    assert {k: v for k, v in usage.items() if k != "updatedTime"} == {
        "inputTokens": 120, "outputTokens": 15, "cachedTokens": 7, "requests": 5, "costUSD": "0.500125"
    }  # fmt: skip
    assert usage["updatedTime"]
    # Nothing new: nothing written again.
    writes = kube.verbs("AgentSession").count(f"patch-status AgentSession {NAME}")
    await ledger.flush()
    assert kube.verbs("AgentSession").count(f"patch-status AgentSession {NAME}") == writes
    # Before the watch brings the written status back, the session's old status does not undo the count.
    assert ledger.usage(info).requests == 5


async def test_a_restarted_proxy_carries_on_from_the_status() -> None:
    kube = FakeKube()
    kube.put(_session())
    first = Ledger(kube)
    _call(first, _info(kube), Tokens(input=10, output=1), "0.01")
    await first.flush()
    second = Ledger(kube)  # a new process: only the status remembers
    assert second.usage(_info(kube)).requests == 1
    _call(second, _info(kube), Tokens(input=10, output=1), "0.01")
    await second.flush()
    assert _usage(kube)["requests"] == 2
    assert _usage(kube)["inputTokens"] == 20
    assert _usage(kube)["costUSD"] == "0.02"


async def test_two_proxies_add_up_and_conflicts_are_retried() -> None:
    kube = FakeKube()
    kube.put(_session())
    one, two = Ledger(kube), Ledger(kube)
    info = _info(kube)
    for _ in range(5):
        _call(one, info, Tokens(input=1, output=2), "0.1")
        _call(two, info, Tokens(input=3, output=4), "0.2")
    await asyncio.gather(one.flush(), two.flush(), one.flush(), two.flush())
    usage = _usage(kube)
    assert (usage["requests"], usage["inputTokens"], usage["outputTokens"], usage["costUSD"]) == (
        10,
        20,
        30,
        "1.5",
    )


class RacingKube(FakeKube):
    """Another writer changes the session between every read and the write after it, `times` times."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.races = times

    async def get(self, resource: Any, namespace: str | None, name: str) -> Manifest:
        body = await super().get(resource, namespace, name)
        if self.races > 0 and resource == AGENT_SESSIONS:
            self.races -= 1
            current = self.find("AgentSession", NS, NAME)
            assert current is not None
            current["status"]["usage"] = {**current["status"].get("usage", {}), "requests": 100 + self.races}
            self.put(current)
        return body


async def test_a_conflict_reads_again_and_adds_to_the_newer_status() -> None:
    kube = RacingKube(times=3)
    kube.put(_session())
    ledger = Ledger(kube)
    _call(ledger, _info(kube), Tokens(input=1), "0")
    await ledger.flush()
    assert _usage(kube)["requests"] == 101  # the other writer's 100, then this proxy's 1
    assert kube.races == 0


async def test_endless_conflicts_keep_the_usage_for_the_next_flush() -> None:
    kube = RacingKube(times=1000)
    kube.put(_session())
    ledger = Ledger(kube)
    info = _info(kube)
    _call(ledger, info, Tokens(input=5), "0")
    await ledger.flush()
    kube.races = 0
    await ledger.flush()
    assert _usage(kube)["inputTokens"] == 5


async def test_a_deleted_or_replaced_session_drops_its_pending_usage() -> None:
    kube = FakeKube()
    kube.put(_session())
    ledger = Ledger(kube)
    info = _info(kube)
    _call(ledger, info, Tokens(input=5), "0")
    replaced = _session()
    replaced["metadata"]["uid"] = "uid-2"
    kube.remove("AgentSession", NS, NAME)
    kube.put(replaced)
    await ledger.flush()
    assert "usage" not in _stored(kube)["status"]
    assert ledger.sessions == 0


async def test_an_api_error_keeps_the_usage() -> None:
    kube = FakeKube()
    kube.put(_session())
    ledger = Ledger(kube)
    _call(ledger, _info(kube), Tokens(output=9), "0")
    kube.refuse("patch-status", "AgentSession", 500, "etcd is unhappy")
    await ledger.flush()
    assert "usage" not in _stored(kube)["status"]
    await ledger.flush()
    assert _usage(kube)["outputTokens"] == 9


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [(Usage(requests=3, costUSD="0.5"), Usage(requests=2, costUSD="0.75"), Usage(requests=3, costUSD="0.75")),
     (None, Usage(requests=1), Usage(requests=1))],
)  # fmt: skip
def test_latest_takes_each_field_from_the_newer_reading(a: Usage | None, b: Usage, expected: Usage) -> None:
    assert latest(a, b) == expected
