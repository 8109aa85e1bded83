"""Leader election: the pure decision as a table, then electors against the in-memory API server."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentsession.api.manifest import Manifest
from agentsession.controller import main as operator_main
from agentsession.controller.leader import (
    Acquire,
    Decision,
    LeaderElector,
    LeaseRecord,
    Renew,
    Sighting,
    Wait,
    decide,
    lease_record,
    micro_time,
    released,
    sighted,
)
from agentsession.kube.errors import Conflict
from agentsession.kube.resources import LEASES, Resource
from agentsession.testing.fake_kube import FakeKube

WALL = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
STAMP = "2026-01-02T03:04:05.678901Z"
EARLIER = "2026-01-01T00:00:00.000000Z"
NS, NAME = "agentsession-system", "agentsession-operator"


def _record(holder: str, duration: int = 15, transitions: int = 2, version: str = "7") -> LeaseRecord:
    return LeaseRecord(holder, duration, EARLIER, transitions, version)


# ---------------------------------------------------------------- the pure decision


@pytest.mark.parametrize(
    ("record", "seen_at", "now", "expected"),
    [
        pytest.param(None, 0.0, 0.0, Acquire({"holderIdentity": "me", "leaseDurationSeconds": 15,
                     "acquireTime": STAMP, "renewTime": STAMP, "leaseTransitions": 0}), id="no lease: create it"),
        pytest.param(_record("me"), 0.0, 100.0, Renew({"holderIdentity": "me", "leaseDurationSeconds": 15,
                     "acquireTime": EARLIER, "renewTime": STAMP, "leaseTransitions": 2}),
                     id="mine: renew, keeping acquireTime and transitions"),
        pytest.param(_record("other"), 10.0, 15.0, Wait("other", 10.0), id="another's, seen 5s ago: wait"),
        pytest.param(_record("other"), 10.0, 24.0, Wait("other", 1.0), id="a second before it expires"),
        pytest.param(_record("other"), 10.0, 25.0, Acquire({"holderIdentity": "me", "leaseDurationSeconds": 15,
                     "acquireTime": STAMP, "renewTime": STAMP, "leaseTransitions": 3}),
                     id="unchanged for its whole duration: take it over"),
        pytest.param(_record("other", duration=30), 10.0, 30.0, Wait("other", 10.0),
                     id="the holder's own duration counts, not mine"),
        pytest.param(_record(""), 10.0, 10.0, Acquire({"holderIdentity": "me", "leaseDurationSeconds": 15,
                     "acquireTime": STAMP, "renewTime": STAMP, "leaseTransitions": 3}),
                     id="released: take it at once"),
    ],
)  # fmt: skip
def test_decide(record: LeaseRecord | None, seen_at: float, now: float, expected: Decision) -> None:
    assert decide(record, seen_at, now, WALL, "me", 15) == expected


def test_expiry_counts_from_the_last_change_seen_never_from_the_holders_clock() -> None:
    # A renewTime far in the past says nothing: the holder's clock may be off. Only a change seen here counts.
    first = sighted(None, _record("other", version="7"), now=100.0)
    assert sighted(first, _record("other", version="7"), now=110.0) == Sighting("7", 100.0)
    renewed = sighted(first, _record("other", version="8"), now=110.0)
    assert renewed == Sighting("8", 110.0)
    assert decide(_record("other", version="8"), renewed.at, 120.0, WALL, "me", 15) == Wait("other", 5.0)


def test_lease_record_reads_what_client_go_writes_and_an_empty_spec() -> None:
    lease = {
        "metadata": {"resourceVersion": "42"},
        "spec": {"holderIdentity": "pod-a_1", "leaseDurationSeconds": 15, "acquireTime": EARLIER,
                 "renewTime": STAMP, "leaseTransitions": 4},
    }  # fmt: skip
    assert lease_record(lease) == LeaseRecord("pod-a_1", 15, EARLIER, 4, "42")
    assert lease_record({"metadata": {"resourceVersion": "1"}}) == LeaseRecord("", 0, None, 0, "1")


def test_a_released_lease_has_no_holder_and_keeps_its_transitions() -> None:
    assert released(_record("me", transitions=5), WALL) == {
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "acquireTime": STAMP,
        "renewTime": STAMP,
        "leaseTransitions": 5,
    }
    assert micro_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"


# ---------------------------------------------------------------- electors against FakeKube


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _elector(
    kube: FakeKube, identity: str, clock: Callable[[], float] | None = None, **times: float
) -> LeaderElector:
    return LeaderElector(
        kube,
        NS,
        NAME,
        identity,
        lease_duration=int(times.get("duration", 15)),
        renew_deadline=times.get("deadline", 10.0),
        retry_period=times.get("retry", 2.0),
        clock=clock or Clock(),
        wall_clock=lambda: WALL,
    )


def _spec(kube: FakeKube) -> Manifest:
    lease = kube.find("Lease", NS, NAME)
    assert lease is not None
    spec: Manifest = lease["spec"]
    return spec


async def test_the_first_elector_creates_the_lease_and_the_second_stands_by() -> None:
    kube = FakeKube()
    a, b = _elector(kube, "a"), _elector(kube, "b")
    assert isinstance(await a.try_once(), Acquire)
    assert a.leading
    assert _spec(kube) == {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": STAMP,
                           "renewTime": STAMP, "leaseTransitions": 0}  # fmt: skip
    writes = len(kube.calls)
    assert await b.try_once() == Wait("a", 15.0)
    assert (b.leading, b.holder) == (False, "a")
    assert kube.verbs()[writes:] == ["get Lease agentsession-operator"], "a standby writes nothing"


async def test_the_leader_renews_with_the_version_it_read() -> None:
    kube = FakeKube()
    a = _elector(kube, "a")
    await a.try_once()
    before = kube.find("Lease", NS, NAME)
    assert before is not None
    assert isinstance(await a.try_once(), Renew)
    after = kube.find("Lease", NS, NAME)
    assert after is not None
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert (after["spec"]["acquireTime"], after["spec"]["leaseTransitions"]) == (STAMP, 0)


async def test_an_expired_lease_is_taken_over_and_its_old_holder_learns_it_lost() -> None:
    kube = FakeKube()
    clock = Clock()
    a, b = _elector(kube, "a", clock), _elector(kube, "b", clock)
    await a.try_once()
    assert isinstance(await b.try_once(), Wait)
    clock.now += 14.9
    assert isinstance(await b.try_once(), Wait), "not before the whole duration"
    clock.now += 0.1
    assert isinstance(await b.try_once(), Acquire)
    assert (_spec(kube)["holderIdentity"], _spec(kube)["leaseTransitions"]) == ("b", 1)
    # The old leader (say it was paused) reads the Lease at its next renewal and steps down.
    assert await a.try_once() == Wait("b", 15.0)
    assert not a.leading
    assert await a.keep() == "b holds the leader lease agentsession-system/agentsession-operator now"


async def test_a_renewal_seen_in_time_keeps_the_standby_waiting() -> None:
    kube = FakeKube()
    clock = Clock()
    a, b = _elector(kube, "a", clock), _elector(kube, "b", clock)
    await a.try_once()
    await b.try_once()
    for _ in range(3):
        clock.now += 10
        await a.try_once()
        assert isinstance(await b.try_once(), Wait)
    assert _spec(kube)["holderIdentity"] == "a"


class InterleavingKube(FakeKube):
    """Yields after every read, so two electors read the same version before either writes."""

    async def get(self, resource: Resource, namespace: str | None, name: str) -> Manifest:
        try:
            return await super().get(resource, namespace, name)
        finally:
            await asyncio.sleep(0)


@pytest.mark.parametrize("existing", [False, True], ids=["both create", "both take over a released lease"])
async def test_of_two_electors_writing_at_once_one_wins_and_the_other_gets_a_conflict(existing: bool) -> None:
    kube = InterleavingKube()
    if existing:
        kube.put({"apiVersion": LEASES.api_version, "kind": "Lease", "metadata": {"name": NAME, "namespace": NS},
                  "spec": {"leaseTransitions": 3}})  # fmt: skip
    a, b = _elector(kube, "a"), _elector(kube, "b")
    outcomes = await asyncio.gather(a.try_once(), b.try_once(), return_exceptions=True)
    assert [type(o) for o in outcomes] == [Acquire, Conflict]
    assert (a.leading, b.leading) == (True, False)
    assert _spec(kube)["holderIdentity"] == "a"


async def test_release_frees_the_lease_and_a_standby_takes_it_at_its_next_try() -> None:
    kube = FakeKube()
    clock = Clock()
    a, b = _elector(kube, "a", clock), _elector(kube, "b", clock)
    await a.try_once()
    await b.try_once()
    await a.release()
    assert not a.leading
    assert "holderIdentity" not in _spec(kube)
    assert _spec(kube)["leaseDurationSeconds"] == 1
    assert isinstance(await b.try_once(), Acquire), "no waiting out the old duration"
    assert (_spec(kube)["holderIdentity"], _spec(kube)["leaseTransitions"]) == ("b", 1)


async def test_release_leaves_another_holders_lease_alone() -> None:
    kube = FakeKube()
    clock = Clock()
    a, b = _elector(kube, "a", clock), _elector(kube, "b", clock)
    await a.try_once()
    await b.try_once()
    clock.now += 15
    await b.try_once()  # a was paused past its duration; b took over
    writes = len(kube.calls)
    await a.release()
    assert kube.verbs()[writes:] == ["get Lease agentsession-operator"]
    assert _spec(kube)["holderIdentity"] == "b"
    await b.release()
    assert "holderIdentity" not in _spec(kube)


async def test_keep_returns_when_another_holder_appears() -> None:
    kube = FakeKube()
    a = _elector(kube, "a", asyncio.get_running_loop().time, deadline=1.0, retry=0.02)
    await a.acquire()
    keeping = asyncio.create_task(a.keep())
    await asyncio.sleep(0.05)
    assert not keeping.done()
    lease = kube.find("Lease", NS, NAME)
    assert lease is not None
    kube.put({**lease, "spec": {**lease["spec"], "holderIdentity": "intruder"}})
    async with asyncio.timeout(1):
        reason = await keeping
    assert reason == "intruder holds the leader lease agentsession-system/agentsession-operator now"
    assert not a.leading


async def test_keep_gives_up_when_renewals_fail_past_the_deadline() -> None:
    kube = FakeKube()
    a = _elector(kube, "a", asyncio.get_running_loop().time, deadline=0.3, retry=0.05)
    await a.acquire()
    kube.refuse("patch", "Lease", 500, "etcdserver: request timed out", "InternalError", times=1000)
    started = asyncio.get_running_loop().time()
    async with asyncio.timeout(2):
        reason = await a.keep()
    waited = asyncio.get_running_loop().time() - started
    assert reason.startswith("the leader lease agentsession-system/agentsession-operator was not renewed")
    assert "etcdserver: request timed out" in reason
    assert 0.2 <= waited < 1.5, waited
    assert not a.leading


async def test_one_failed_renewal_within_the_deadline_is_survived() -> None:
    kube = FakeKube()
    a = _elector(kube, "a", asyncio.get_running_loop().time, deadline=2.0, retry=0.05)
    await a.acquire()
    kube.refuse("patch", "Lease", 500, "etcdserver: leader changed", "InternalError", times=2)
    keeping = asyncio.create_task(a.keep())
    await asyncio.sleep(0.8)
    assert not keeping.done(), "renewals resumed in time"
    assert a.leading
    keeping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await keeping


async def test_acquire_waits_for_a_holder_to_expire() -> None:
    kube = FakeKube()
    loop = asyncio.get_running_loop()
    kube.put({"apiVersion": LEASES.api_version, "kind": "Lease", "metadata": {"name": NAME, "namespace": NS},
              "spec": {"holderIdentity": "gone", "leaseDurationSeconds": 1}})  # fmt: skip
    b = _elector(kube, "b", loop.time, deadline=0.5, retry=0.05)
    started = loop.time()
    async with asyncio.timeout(3):
        await b.acquire()
    assert 1.0 <= loop.time() - started < 2.5
    assert _spec(kube)["holderIdentity"] == "b"


# ---------------------------------------------------------------- the process's reaction


def test_losing_the_lease_exits_the_process_at_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    exits: list[int] = []

    monkeypatch.setattr(os, "_exit", exits.append)
    loop = asyncio.new_event_loop()
    try:
        lost: asyncio.Future[str] = loop.create_future()
        lost.set_result("b holds the leader lease ns/name now")
        cancelled: asyncio.Future[str] = loop.create_future()
        cancelled.cancel()
        operator_main._exit_when_lost(cancelled)
        assert exits == [], "a renewal cancelled at shutdown is no loss"
        operator_main._exit_when_lost(lost)
    finally:
        loop.close()
    assert exits == [operator_main.LOST_LEADERSHIP_EXIT_CODE]
    assert "lost the leader lease (b holds the leader lease ns/name now); exiting at once" in caplog.text


def test_the_lease_namespace_defaults_to_the_pods_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "namespace"
    monkeypatch.setattr(operator_main, "SERVICE_ACCOUNT_NAMESPACE", file)
    with pytest.raises(SystemExit) as exited:
        operator_main._own_namespace()
    assert exited.value.code == 2
    assert "--leader-election-namespace / AGENTSESSION_LEADER_ELECTION_NAMESPACE" in capsys.readouterr().err
    file.write_text("agentsession-system\n")
    assert operator_main._own_namespace() == "agentsession-system"
