"""The soak run's invariants, on snapshots built by hand: each rule holds quiet on a consistent namespace, and
speaks once its bad condition outlasts its bound."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks.soak.invariants import Bounds, Invariants, Snapshot, Violation

NS = "soak"


def session(
    name: str = "a",
    *,
    phase: str | None = "Ready",
    suspend: bool = False,
    generation: int = 1,
    observed: int | None = 1,
    pod: str | None = "a-agent",
    deleting: bool = False,
    acp: bool = True,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": generation}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {}
    if phase is not None:
        ready = "True" if phase == "Ready" else "False"
        status = {
            "phase": phase,
            "observedGeneration": observed,
            "conditions": [
                {"type": "Ready", "status": ready, "reason": phase, "message": f"phase {phase}",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
        }  # fmt: skip
        if pod:
            status["podName"] = pod
        if acp:
            status["acp"] = {"sessionId": f"acp-{name}"}
    return {"metadata": meta, "spec": {"suspend": suspend}, "status": status}


def child(name: str, owner: str = "a", *, deleting: bool = False) -> dict[str, Any]:
    """A child as an item of a list: without `kind`."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "ownerReferences": [{"kind": "AgentSession", "name": owner, "uid": f"uid-{owner}"}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def snap(
    at: float,
    sessions: list[dict[str, Any]],
    pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
    *,
    secrets: list[dict[str, Any]] = (),  # type: ignore[assignment]
    claims: list[dict[str, Any]] = (),  # type: ignore[assignment]
    gateway: dict[str, str] | None = None,
) -> Snapshot:
    if gateway is None:
        # What a gateway in step with the API says.
        gateway = {f"{NS}/{s['metadata']['name']}": _expected(s) for s in sessions}
    return Snapshot(at, sessions, list(pods), list(secrets), list(claims), gateway)


def _expected(body: dict[str, Any]) -> str:
    from agentsession.api.views import SessionView
    from agentsession.gateway.status import derive_status

    return derive_status(SessionView(body), None)[0]


def names(violations: list[Violation]) -> list[tuple[str, str]]:
    return [(v.invariant, v.subject) for v in violations]


POD = child("a-agent")
SECRET = child("a-agentctl-token")
CLAIM = child("a-workspace")


def test_a_consistent_namespace_breaks_nothing_over_time() -> None:
    inv = Invariants()
    for at in (0.0, 100.0, 1000.0):
        assert inv.check(snap(at, [session()], [POD], secrets=[SECRET], claims=[CLAIM])) == []
        suspended = session("b", phase="Suspended", suspend=True, generation=2, observed=2, pod=None)
        assert inv.check(snap(at, [suspended])) == []


def test_a_running_turn_is_ready_for_the_api() -> None:
    inv = Invariants()
    assert inv.check(snap(0, [session()], [POD], gateway={f"{NS}/a": "processing"})) == []
    assert inv.check(snap(100, [session()], [POD], gateway={f"{NS}/a": "processing"})) == []


def test_two_pods_of_one_session_break_at_once() -> None:
    found = Invariants().check(snap(0, [session()], [POD, child("a-agent-2")]))
    assert names(found) == [("one-pod", "a")]
    assert "a-agent, a-agent-2" in found[0].detail


@pytest.mark.parametrize(
    ("phase", "bound"), [("Pending", 60.0), ("Starting", 60.0), (None, 60.0), ("Terminating", 60.0)]
)
def test_a_phase_that_lasts_past_its_bound_is_reported_once(phase: str | None, bound: float) -> None:
    inv = Invariants()
    body = session(phase=phase, pod=None, deleting=phase == "Terminating")
    assert inv.check(snap(10, [body])) == []
    assert inv.check(snap(10 + bound - 1, [body])) == []
    found = inv.check(snap(10 + bound, [body]))
    assert names(found) == [("stuck", f"a in {phase or 'no phase'}")]
    assert inv.check(snap(10 + bound + 30, [body])) == []


def test_a_new_episode_starts_its_clock_again() -> None:
    inv = Invariants(Bounds(starting=10))
    starting = session(phase="Starting", pod=None)
    assert inv.check(snap(0, [starting])) == []
    assert inv.check(snap(5, [session()], [POD])) == []
    assert inv.check(snap(12, [starting])) == []  # 12 s since the first time, 0 s since this one
    assert inv.longest == {"stuck": 0.0}
    assert names(inv.check(snap(22, [starting]))) == [("stuck", "a in Starting")]
    assert inv.longest == {"stuck": 10.0}


def test_a_failed_session_breaks_at_once_with_its_reason() -> None:
    found = Invariants().check(snap(0, [session(phase="Failed", pod=None)]))
    assert names(found) == [("failed", "a")]
    assert "phase Failed" in found[0].detail


def test_children_of_a_gone_session_may_linger_only_for_the_orphan_bound() -> None:
    inv = Invariants(Bounds(orphan=30))
    leftovers = [child("gone-agentctl-token", "gone")]
    claims = [child("gone-workspace", "gone")]
    assert inv.check(snap(0, [], secrets=leftovers, claims=claims, gateway={})) == []
    found = inv.check(snap(30, [], secrets=leftovers, claims=claims, gateway={}))
    assert names(found) == [
        ("orphan", "Secret gone-agentctl-token"),
        ("orphan", "PersistentVolumeClaim gone-workspace"),
    ]
    assert inv.check(snap(31, [], gateway={})) == []


def test_status_may_lag_the_spec_only_for_a_while() -> None:
    inv = Invariants(Bounds(status_lag=15))
    lagging = session(generation=3, observed=2)
    assert inv.check(snap(0, [lagging], [POD])) == []
    assert names(inv.check(snap(15, [lagging], [POD]))) == [("status-lag", "a")]


def test_a_status_of_the_current_generation_must_match_suspend() -> None:
    # Written for generation 2 (suspend: false), yet the phase says Suspended.
    lying = session(phase="Suspended", suspend=False, generation=2, observed=2, pod=None)
    assert names(Invariants().check(snap(0, [lying]))) == [("spec-status", "a")]
    running = session(phase="Ready", suspend=True, generation=2, observed=2)
    assert ("spec-status", "a") in names(Invariants().check(snap(0, [running], [POD])))


def test_a_suspended_session_loses_its_pod_within_the_bound() -> None:
    inv = Invariants(Bounds(suspended_pod=30))
    suspended = session(phase="Suspended", suspend=True, generation=2, observed=2)
    assert inv.check(snap(0, [suspended], [POD])) == []
    assert names(inv.check(snap(30, [suspended], [POD]))) == [("suspended-pod", "a")]


def test_ready_needs_its_running_pod() -> None:
    inv = Invariants(Bounds(status_lag=5))
    assert inv.check(snap(0, [session()], [])) == []
    assert names(inv.check(snap(5, [session()], []))) == [("ready-pod", "a")]
    inv = Invariants(Bounds(status_lag=5))
    terminating = child("a-agent", deleting=True)
    inv.check(snap(0, [session()], [terminating]))
    assert names(inv.check(snap(5, [session()], [terminating]))) == [("ready-pod", "a")]


def test_the_gateway_must_follow_the_api_within_its_bound() -> None:
    inv = Invariants(Bounds(gateway=15))
    suspended = session(phase="Suspended", suspend=True, generation=2, observed=2, pod=None)
    stale = {f"{NS}/a": "ready"}
    assert inv.check(snap(0, [suspended], gateway=stale)) == []
    found = inv.check(snap(15, [suspended], gateway=stale))
    assert names(found) == [("gateway-view", f"{NS}/a")]
    assert "gateway says ready, the API's object gives completed" in found[0].detail


def test_the_gateway_must_know_every_session() -> None:
    inv = Invariants(Bounds(gateway=15))
    assert inv.check(snap(0, [session()], [POD], gateway={})) == []
    assert names(inv.check(snap(15, [session()], [POD], gateway={}))) == [("gateway-view", f"{NS}/a")]


def test_the_gateway_must_say_killed_of_a_deleted_session() -> None:
    inv = Invariants(Bounds(gateway=15))
    assert inv.check(snap(0, [], gateway={f"{NS}/gone": "ready", f"{NS}/done": "killed"})) == []
    found = inv.check(snap(15, [], gateway={f"{NS}/gone": "ready", f"{NS}/done": "killed"}))
    assert names(found) == [("gateway-view", f"{NS}/gone")]


def test_time_the_api_server_was_away_does_not_count() -> None:
    inv = Invariants(Bounds(orphan=30))
    leftover = [child("gone-agentctl-token", "gone")]
    assert inv.check(snap(0, [], secrets=leftover, gateway={})) == []
    # The API server was away from 10 s to 50 s; its controllers get until 80 s to catch up.
    inv.excuse(80)
    assert inv.check(snap(50, [], secrets=leftover, gateway={})) == []
    assert inv.check(snap(109, [], secrets=leftover, gateway={})) == []
    assert names(inv.check(snap(110, [], secrets=leftover, gateway={}))) == [
        ("orphan", "Secret gone-agentctl-token")
    ]
    # A rule without a bound waits for the excuse to end too.
    inv = Invariants()
    inv.excuse(5)
    two_pods = [POD, child("a-agent-2")]
    assert inv.check(snap(1, [session()], two_pods)) == []
    assert names(inv.check(snap(5, [session()], two_pods))) == [("one-pod", "a")]
