"""What must hold at every moment of a soak run, judged on snapshots of the namespace and of the gateway's view.

Pure: the caller lists the objects and passes the time in, so each rule has a table test. A rule names a bad
condition and how long it may last: a status catching up with a spec change, or children the garbage collector
has yet to remove, are bad only when they last. A condition that outlives its bound is one violation, reported
once until the condition clears.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentsession.api.constants import KIND
from agentsession.api.manifest import Manifest
from agentsession.api.views import PodView, SessionView
from agentsession.gateway.status import agent_id, derive_status


@dataclass(frozen=True)
class Bounds:
    """How long, in seconds, each bad condition may last before it is a violation."""

    starting: float = 60.0  # in Pending or Starting (or no phase yet)
    terminating: float = 60.0  # deleted, with the finalizer still on
    orphan: float = 30.0  # a Pod, Secret or claim whose session is gone: the garbage collector's delay
    status_lag: float = 30.0  # observedGeneration behind the spec; Ready without its pod listed
    suspended_pod: float = 30.0  # a suspended session's pod still there: an idle agent stops in about 3 s
    gateway: float = 15.0  # the gateway's status differing from the one the API's object gives


@dataclass(frozen=True)
class Violation:
    at: float  # seconds into the run
    invariant: str
    subject: str
    detail: str

    def line(self) -> str:
        return f"[{self.at:7.1f}s] {self.invariant} {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Snapshot:
    at: float  # seconds into the run
    sessions: Sequence[Manifest]
    pods: Sequence[Manifest]
    secrets: Sequence[Manifest]
    claims: Sequence[Manifest]
    # agent id → the status the gateway last reported for it (session_state, then agent_status frames)
    gateway: Mapping[str, str]


@dataclass(frozen=True)
class _Bad:
    invariant: str
    subject: str
    detail: str
    bound: float


# Only the gateway knows whether a turn is running: for the API both are a Ready agent.
_SAME_FOR_THE_API = {"processing": "ready"}


def owner_uid(child: Manifest) -> str | None:
    for ref in (child.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == KIND:
            return str(ref.get("uid"))
    return None


def children(snap: Snapshot) -> list[tuple[str, Manifest]]:
    """Every Pod, Secret and claim with its kind, which the items of a list do not carry."""
    return [
        *(("Pod", c) for c in snap.pods),
        *(("Secret", c) for c in snap.secrets),
        *(("PersistentVolumeClaim", c) for c in snap.claims),
    ]


class Invariants:
    def __init__(self, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds()
        self._since: dict[tuple[str, str], float] = {}
        self._reported: set[tuple[str, str]] = set()
        # Per rule, the longest its bad condition has lasted: how close the run came to each bound.
        self.longest: dict[str, float] = {}
        self._excused_until = float("-inf")

    def excuse(self, until: float) -> None:
        """Time before `until` does not count: the API server did not answer (the node's control plane is
        shared, and may be restarted under the run), and the controllers catch up once it does."""
        self._excused_until = max(self._excused_until, until)

    def check(self, snap: Snapshot) -> list[Violation]:
        sessions = [SessionView(body) for body in snap.sessions]
        pods_of: dict[str, list[PodView]] = defaultdict(list)
        for pod in snap.pods:
            owner = owner_uid(pod)
            if owner:
                pods_of[owner].append(PodView(pod))
        bad = [
            *self._phases(sessions),
            *self._pods(sessions, pods_of),
            *self._orphans(sessions, snap),
            *self._gateway(sessions, snap.gateway),
        ]
        return self._episodes(snap.at, bad)

    def _phases(self, sessions: list[SessionView]) -> list[_Bad]:
        bad = []
        for s in sessions:
            phase = s.status.phase
            subject = f"{s.name} in {phase or 'no phase'}"
            if phase in (None, "Pending", "Starting"):
                bad.append(_Bad("stuck", subject, "not Ready yet", self.bounds.starting))
            elif phase == "Terminating":
                bad.append(_Bad("stuck", subject, "not deleted yet", self.bounds.terminating))
            elif phase == "Failed":
                ready = s.condition("Ready")
                why = f"{ready.reason}: {ready.message}" if ready else "no Ready condition"
                bad.append(_Bad("failed", s.name, why, 0.0))
        return bad

    def _pods(self, sessions: list[SessionView], pods_of: Mapping[str, list[PodView]]) -> list[_Bad]:
        bad = []
        for s in sessions:
            pods = pods_of.get(s.uid, [])
            if len(pods) > 1:
                names = ", ".join(sorted(p.name for p in pods))
                bad.append(_Bad("one-pod", s.name, f"{len(pods)} pods: {names}", 0.0))
            status = s.status
            # Without a status the operator has not served it yet: the `stuck` rule speaks for that.
            if s.deleting or status.phase is None:
                continue
            observed = status.observedGeneration
            if observed != s.generation:
                detail = f"observedGeneration {observed} behind generation {s.generation}"
                bad.append(_Bad("status-lag", s.name, detail, self.bounds.status_lag))
            elif (status.phase == "Suspended") != s.suspended:
                detail = f"phase {status.phase} with spec.suspend={s.suspended} at generation {observed}"
                bad.append(_Bad("spec-status", s.name, detail, 0.0))
            if s.suspended and pods:
                detail = f"suspended, but pod {pods[0].name} is still there"
                bad.append(_Bad("suspended-pod", s.name, detail, self.bounds.suspended_pod))
            if status.phase == "Ready" and not any(p.name == status.podName and not p.deleting for p in pods):
                detail = f"Ready, but its pod {status.podName} is not running"
                bad.append(_Bad("ready-pod", s.name, detail, self.bounds.status_lag))
        return bad

    def _orphans(self, sessions: list[SessionView], snap: Snapshot) -> list[_Bad]:
        alive = {s.uid for s in sessions}
        bad = []
        for kind, child in children(snap):
            owner = owner_uid(child)
            if owner is not None and owner not in alive:
                detail = f"its AgentSession (uid {owner}) is gone"
                bad.append(_Bad("orphan", f"{kind} {child['metadata']['name']}", detail, self.bounds.orphan))
        return bad

    def _gateway(self, sessions: list[SessionView], seen: Mapping[str, str]) -> list[_Bad]:
        bad = []
        listed = set()
        for s in sessions:
            key = agent_id(s.namespace, s.name)
            listed.add(key)
            expected, _ = derive_status(s, None)
            reported = seen.get(key)
            if reported is None or _SAME_FOR_THE_API.get(reported, reported) != expected:
                detail = f"gateway says {reported or 'nothing'}, the API's object gives {expected}"
                bad.append(_Bad("gateway-view", key, detail, self.bounds.gateway))
        for key, reported in seen.items():
            if key not in listed and reported != "killed":
                detail = f"gateway says {reported} of a session the API no longer has"
                bad.append(_Bad("gateway-view", key, detail, self.bounds.gateway))
        return bad

    def _episodes(self, now: float, bad: list[_Bad]) -> list[Violation]:
        current = {(b.invariant, b.subject) for b in bad}
        for key in [k for k in self._since if k not in current]:
            del self._since[key]
            self._reported.discard(key)
        violations = []
        for b in bad:
            key = (b.invariant, b.subject)
            since = max(self._since.setdefault(key, now), self._excused_until)
            self.longest[b.invariant] = max(self.longest.get(b.invariant, 0.0), now - since)
            if now - since >= b.bound and key not in self._reported:
                self._reported.add(key)
                lasted = f" (for {now - since:.0f}s; bound {b.bound:.0f}s)" if b.bound else ""
                violations.append(Violation(now, b.invariant, b.subject, b.detail + lasted))
        return violations
