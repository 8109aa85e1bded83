"""Leader election on a `coordination.k8s.io/v1` Lease, so that of several operator replicas exactly one acts.

The scheme is client-go's (`k8s.io/client-go/tools/leaderelection`), so `kubectl get lease` reads it as it reads
the control plane's own: the Lease's spec holds `holderIdentity`, `leaseDurationSeconds`, `acquireTime`,
`renewTime` and `leaseTransitions`, and every write carries the resourceVersion it read, so of two replicas
writing at once one gets a Conflict and neither overwrites the other.

A standby judges expiry by its own clock, from the moment it saw the record last change, never by the holder's
`renewTime`: clocks that disagree between nodes cannot make two leaders. It takes the Lease over once a whole
`leaseDurationSeconds` passed with no change, or at its next try when the holder released it (no holder). The
leader renews every retry period and gives up when it could not renew for the renew deadline, which is shorter
than the lease duration, so it has stopped acting before any standby may start.

`decide` is the pure core (the record as read, the time, this replica's identity → acquire, renew or wait);
`LeaderElector` reads, decides and writes. Stopping the work when leadership is lost is the caller's job.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from agentsession.api.manifest import Manifest
from agentsession.api.times import format_time
from agentsession.kube.client import Kube
from agentsession.kube.errors import KubeError, NotFound
from agentsession.kube.resources import LEASES

log = logging.getLogger(__name__)


def new_identity() -> str:
    """The pod's name (its hostname) and a random suffix: a restarted container is another candidate, so it never
    mistakes its predecessor's record for its own."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(moment: datetime) -> str:
    """A Lease's MicroTime: RFC 3339 in UTC with microseconds."""
    return format_time(moment, "microseconds")


@dataclass(frozen=True)
class LeaseRecord:
    """The election's part of a Lease as read; `holder` is "" when nobody holds it."""

    holder: str
    duration_seconds: int
    acquire_time: str | None
    transitions: int
    resource_version: str


def lease_record(lease: Manifest) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
    )


@dataclass(frozen=True)
class Sighting:
    """The record as this replica last saw it change (by resourceVersion), and when, on its monotonic clock."""

    resource_version: str
    at: float


def sighted(previous: Sighting | None, record: LeaseRecord, now: float) -> Sighting:
    if previous is not None and previous.resource_version == record.resource_version:
        return previous
    return Sighting(record.resource_version, now)


@dataclass(frozen=True)
class Acquire:
    """Write `spec` as the new holder: create the Lease when none was read, else take it over."""

    spec: Manifest


@dataclass(frozen=True)
class Renew:
    spec: Manifest


@dataclass(frozen=True)
class Wait:
    """Another replica holds the Lease; it expires in `seconds_left` unless renewed."""

    holder: str
    seconds_left: float


Decision = Acquire | Renew | Wait


def _spec(identity: str, duration: int, acquired: str, renewed: str, transitions: int) -> Manifest:
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration,
        "acquireTime": acquired,
        "renewTime": renewed,
        "leaseTransitions": transitions,
    }


def decide(
    record: LeaseRecord | None, seen_at: float, now: float, wall: datetime, identity: str, duration: int
) -> Decision:
    """What to do with the Lease as read: `seen_at` is when this replica saw the record last change and `now` the
    same monotonic clock; `wall` stamps the times written; `duration` is this replica's lease duration."""
    stamp = micro_time(wall)
    if record is None:
        return Acquire(_spec(identity, duration, stamp, stamp, 0))
    if record.holder == identity:
        return Renew(_spec(identity, duration, record.acquire_time or stamp, stamp, record.transitions))
    # The holder's own duration, as it wrote it, is what it promised to renew within.
    left = record.duration_seconds - (now - seen_at)
    if record.holder and left > 0:
        return Wait(record.holder, left)
    return Acquire(_spec(identity, duration, stamp, stamp, record.transitions + 1))


def released(record: LeaseRecord, wall: datetime) -> Manifest:
    """The spec a leader leaves behind when it stops: no holder, so a standby takes over at its next try (and,
    as client-go writes it, a one-second duration for readers that look at the times only)."""
    stamp = micro_time(wall)
    return {
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": record.transitions,
    }


class LeaderElector:
    """One replica's side of the election on the Lease `namespace/name`."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: int,
        renew_deadline: float,
        retry_period: float,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._kube = kube
        self.namespace, self.name, self.identity = namespace, name, identity
        self._duration = lease_duration
        self._deadline = renew_deadline
        self._retry = retry_period
        self._clock = clock
        self._wall = wall_clock
        self._sighting: Sighting | None = None
        # Monotonic start of the last attempt that wrote this replica as holder; None while not leading. The
        # start, not the end: the write landed after it, so a standby's clock for it started later still.
        self._renewed_at: float | None = None
        self._lost_to = ""
        self._last_error = ""
        self.holder = ""

    @property
    def leading(self) -> bool:
        return self._renewed_at is not None

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def try_once(self) -> Decision:
        """One round: read the Lease, decide, and write unless waiting. API errors propagate (a Conflict when
        another replica wrote in between)."""
        started = self._clock()
        try:
            found: Manifest | None = await self._kube.get(LEASES, self.namespace, self.name)
        except NotFound:
            found = None
        now = self._clock()
        record = lease_record(found) if found is not None else None
        if record is not None:
            self._sighting = sighted(self._sighting, record, now)
        seen_at = self._sighting.at if record is not None and self._sighting is not None else now
        decision = decide(record, seen_at, now, self._wall(), self.identity, self._duration)
        if isinstance(decision, Wait):
            if self.leading:
                self._renewed_at, self._lost_to = None, decision.holder
            if decision.holder != self.holder:
                log.info(
                    "standing by: %s holds the leader lease %s (expires in %.1fs unless renewed)",
                    decision.holder, self.lease, decision.seconds_left,
                )  # fmt: skip
            self.holder = decision.holder
            return decision
        if record is None:
            await self._kube.create(
                {
                    "apiVersion": LEASES.api_version,
                    "kind": LEASES.kind,
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": decision.spec,
                }
            )
        else:
            patch = {"metadata": {"resourceVersion": record.resource_version}, "spec": decision.spec}
            await self._kube.patch(LEASES, self.namespace, self.name, patch)
        if isinstance(decision, Acquire):
            log.info(
                "acquired the leader lease %s as %s (previous holder: %s, transitions: %d)",
                self.lease, self.identity, record.holder if record and record.holder else "none",
                decision.spec["leaseTransitions"],
            )  # fmt: skip
        self._renewed_at, self.holder = started, self.identity
        return decision

    async def _attempt(self) -> None:
        """`try_once` within the time left: the renew deadline's remainder while leading, so a hung call cannot
        keep a leader that should have stopped; API errors are logged (once per kind), never raised."""
        budget = (
            self._deadline if self._renewed_at is None else self._renewed_at + self._deadline - self._clock()
        )
        if budget <= 0:
            return
        try:
            async with asyncio.timeout(budget):
                await self.try_once()
        except (KubeError, TimeoutError) as error:
            message = str(error) or f"no answer within {budget:.1f}s"
            if message != self._last_error or self.leading:
                log.warning("leader lease %s: %s", self.lease, message)
            self._last_error = message
        else:
            self._last_error = ""

    async def acquire(self) -> None:
        """Returns once this replica holds the Lease, trying every retry period."""
        while True:
            await self._attempt()
            if self.leading:
                return
            await asyncio.sleep(self._retry)

    async def keep(self) -> str:
        """Renews every retry period while leading; returns why leadership was lost (another holder, or no
        renewal within the renew deadline). The caller must stop acting at once."""
        while True:
            if self._renewed_at is None:
                return f"{self._lost_to or 'another replica'} holds the leader lease {self.lease} now"
            left = self._renewed_at + self._deadline - self._clock()
            if left <= 0:
                self._renewed_at = None
                return (
                    f"the leader lease {self.lease} was not renewed within the renew deadline "
                    f"({self._deadline:g}s): {self._last_error or 'no answer'}"
                )
            await asyncio.sleep(min(self._retry, left))
            await self._attempt()

    async def release(self) -> None:
        """Gives the Lease up if this replica holds it, so a standby takes over at its next try instead of
        after a whole lease duration. Call it only once this replica has stopped acting."""
        if not self.leading:
            return
        self._renewed_at = None
        try:
            async with asyncio.timeout(self._deadline):
                record = lease_record(await self._kube.get(LEASES, self.namespace, self.name))
                if record.holder != self.identity:
                    return
                patch = {
                    "metadata": {"resourceVersion": record.resource_version},
                    "spec": released(record, self._wall()),
                }
                await self._kube.patch(LEASES, self.namespace, self.name, patch)
        except (KubeError, TimeoutError) as error:
            log.warning(
                "could not release the leader lease %s (%s); a standby takes over when it expires in %ds",
                self.lease, error or "no answer", self._duration,
            )  # fmt: skip
            return
        log.info("released the leader lease %s", self.lease)
