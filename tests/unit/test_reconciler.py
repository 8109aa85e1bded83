"""The reconciler against the in-memory API server and agentctl: the scenarios the cluster tier proves on real
parts (creation, readiness, suspend, resume, pod loss, agentctl restart, idle, deadlines, refused children),
each a few reconciles in milliseconds. The kubelet's part is played by `Kubelet` below."""

from __future__ import annotations

import ast
import base64
import json
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentsession.agentctl_client import AgentctlError
from agentsession.api.acp import MODES_MAX, MODES_MAX_BYTES, SessionMode
from agentsession.api.constants import API_VERSION, KIND, TOKEN_KEY
from agentsession.api.models import AgentSessionSpec
from agentsession.api.views import SessionView
from agentsession.controller import decisions as decisions_module
from agentsession.controller import reconciler as reconciler_module
from agentsession.controller.config import AgentProfile, OperatorConfig
from agentsession.controller.decisions import (
    PROBE_RECHECK_SECONDS,
    CreateChild,
    DeletePod,
    Observed,
    Plan,
    StartAcp,
    Suspend,
    WriteStatus,
    decide,
    desired_pod,
    wants_activity,
)
from agentsession.controller.pod_builder import build_pod, build_token_secret
from agentsession.controller.reconciler import Reconciler
from agentsession.controller.status_mapper import map_status
from agentsession.kube.resources import AGENT_SESSIONS, SECRETS
from agentsession.testing.fake_agentctl import (
    PERMISSION_OPTIONS,
    FakeAgentctl,
    FakeAgentctlConnector,
    FakeTurn,
)
from agentsession.testing.fake_kube import FakeKube

NS, NAME, POD = "team", "s1", "s1-agent"
POD_IP = "10.0.0.7"
ENDPOINT = f"http://{POD_IP}:9999"
# What the release key gives each stem, here made readable.
TOKEN = f"token-of-{NS}-{NAME}"
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Kubelet:
    """Plays the node: moves the session's pod through the states the real kubelet reports."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube

    def pod(self) -> dict[str, Any]:
        found = self.kube.find("Pod", NS, POD)
        assert found is not None, "no pod"
        return found

    def run(self, *, agentctl_ready: bool = True, restarts: int = 0, agent_restarts: int = 0) -> None:
        pod = self.pod()
        started = "2026-01-01T12:00:01Z"
        pod["spec"]["nodeName"] = "node-1"
        pod["status"] = {
            "phase": "Running",
            "podIP": POD_IP,
            "startTime": started,
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "initContainerStatuses": [
                {
                    "name": "agentctl",
                    "restartCount": restarts,
                    "started": True,
                    "ready": agentctl_ready,
                    "state": {"running": {"startedAt": started}},
                }
            ],
            "containerStatuses": [
                {
                    "name": "agent",
                    "restartCount": agent_restarts,
                    "ready": True,
                    "state": {"running": {"startedAt": started}},
                    **(
                        {"lastState": {"terminated": {"exitCode": 137, "reason": "Error"}}}
                        if agent_restarts
                        else {}
                    ),
                }
            ],
        }
        self.kube.put(pod)

    def lose_node(self) -> None:
        """What the node controller writes when the node stops reporting: the pod's Ready alone turns False."""
        pod = self.pod()
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T12:05:00Z"},
        ]
        self.kube.put(pod)

    def fail(self, reason: str) -> None:
        pod = self.pod()
        pod["status"] = {
            **pod.get("status", {}),
            "phase": "Failed",
            "reason": reason,
            "message": f"pod {reason}",
        }
        self.kube.put(pod)

    def lose_pod(self) -> None:
        self.kube.remove("Pod", NS, POD)


class World:
    def __init__(self, **config: Any) -> None:
        self.kube = FakeKube()
        self.agentctls = FakeAgentctlConnector()
        self.clock = Clock()
        self.kubelet = Kubelet(self.kube)
        self.config = OperatorConfig(image="agentsession:test", **config)
        self.restart_operator()

    def restart_operator(self) -> None:
        """A new reconciler: what the operator remembered (tokens it knows its Secrets hold) is gone."""
        self.reconciler = Reconciler(
            self.config,
            self.kube,
            self.agentctls,
            self.pods_labelled,
            lambda namespace, stem: f"token-of-{namespace}-{stem}",
            clock=self.clock,
        )

    def pods_labelled(self, namespace: str, label: str, value: str) -> list[dict[str, Any]]:
        """The operator's pod index, read from the fake API."""
        return [
            obj
            for (kind, ns, _), obj in sorted(self.kube.objects.items())
            if kind == "Pod" and ns == namespace and (obj["metadata"].get("labels") or {}).get(label) == value
        ]

    @property
    def agentctl(self) -> FakeAgentctl:
        return self.agentctls.agent(ENDPOINT)

    async def apply(self, **spec: Any) -> None:
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"agent": {"type": "demo"}, **spec},
        }
        await self.kube.create(body)
        self.kube.calls.clear()

    async def patch_spec(self, **spec: Any) -> None:
        await self.kube.patch(AGENT_SESSIONS, NS, NAME, {"spec": spec})

    async def reconcile(self) -> float | None:
        return await self.reconciler.reconcile(NS, NAME)

    def session(self) -> dict[str, Any]:
        found = self.kube.find(KIND, NS, NAME)
        assert found is not None
        return found

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.session().get("status") or {}
        return status

    def condition(self, kind: str) -> dict[str, Any] | None:
        return next((c for c in self.status()["conditions"] if c["type"] == kind), None)

    def reasons(self) -> dict[str, str]:
        return {c["type"]: c["reason"] for c in self.status()["conditions"]}

    def events(self) -> list[tuple[str, str]]:
        return [(e["type"], e["reason"]) for e in self.kube.of_kind("Event")]

    def event_messages(self) -> list[str]:
        return [e["message"] for e in self.kube.of_kind("Event")]

    def event_reasons(self) -> list[str]:
        return [reason for _, reason in self.events()]

    def forget_events(self) -> None:
        for event in self.kube.of_kind("Event"):
            self.kube.remove("Event", NS, event["metadata"]["name"])
        self.kube.calls.clear()
        self.agentctl.calls.clear()

    async def until_ready(self, **spec: Any) -> None:
        await self.apply(**spec)
        await self.reconcile()
        self.kubelet.run()
        await self.reconcile()
        assert self.status()["phase"] == "Ready", self.reasons()
        self.forget_events()


async def test_creation_makes_token_pod_and_a_pending_status() -> None:
    world = World()
    await world.apply(prompt="hello")
    assert await world.reconcile() is None
    secret = world.kube.find("Secret", NS, "s1-agentctl-token")
    assert secret is not None
    assert base64.b64decode(secret["data"][TOKEN_KEY]).decode() == TOKEN
    pod = world.kubelet.pod()
    assert pod["metadata"]["ownerReferences"][0]["uid"] == world.session()["metadata"]["uid"]
    assert world.status()["phase"] == "Pending"
    assert world.status()["podsCreated"] == 1
    assert world.reasons()["PodScheduled"] == "Pending"
    assert ("Normal", "PodCreated") in world.events()
    # A session never reported on has no Secret to read: its pod follows the session's read and its Secret.
    assert world.kube.verbs()[:3] == [
        f"get AgentSession {NAME}",
        "create Secret s1-agentctl-token",
        f"create Pod {POD}",
    ]
    world.kube.calls.clear()
    world.kubelet.run()
    await world.reconcile()
    assert world.status()["phase"] == "Ready"
    # The token was kept as the Secret was created: starting ACP reads no Secret.
    assert "get Secret s1-agentctl-token" not in world.kube.verbs()


async def test_a_secret_left_by_a_reconcile_that_died_before_its_status_is_kept() -> None:
    world = World()
    await world.apply(prompt="hello")
    left = build_token_secret(SessionView(world.session()).ref, TOKEN)
    await world.kube.create(left)
    await world.reconcile()
    assert "patch Secret s1-agentctl-token" not in world.kube.verbs()
    world.kubelet.run()
    await world.reconcile()
    assert world.agentctls.connections == [(ENDPOINT, TOKEN)]


async def test_a_secret_holding_another_token_gets_the_one_the_release_key_gives() -> None:
    """Written before tokens were derived (or by hand): the pod's agentctl and the gateway must agree on it."""
    world = World()
    await world.apply(prompt="hello")
    await world.reconcile()
    world.kubelet.run()
    await world.reconcile()
    await world.kube.patch(SECRETS, NS, "s1-agentctl-token", {"data": {TOKEN_KEY: "b2xk"}})
    world.restart_operator()
    await world.reconcile()
    secret = world.kube.find("Secret", NS, "s1-agentctl-token")
    assert secret is not None
    assert base64.b64decode(secret["data"][TOKEN_KEY]).decode() == TOKEN


async def test_ready_agentctl_starts_acp_with_the_prompt_once() -> None:
    world = World()
    await world.apply(prompt="hello", mode="code")
    await world.reconcile()
    world.kubelet.run()
    await world.reconcile()
    status = world.status()
    assert status["phase"] == "Ready"
    assert world.reasons() == {
        "PodScheduled": "Scheduled",
        "AgentctlReady": "ProbeSucceeded",
        "AgentInitialized": "Initialized",
        "Suspended": "Active",
        "Ready": "Ready",
        "BudgetExhausted": "WithinBudget",
    }
    assert status["acp"]["sessionId"] == world.agentctl.session_id
    assert status["acp"]["podUID"] == world.kubelet.pod()["metadata"]["uid"]
    assert world.agentctl.current_mode_id == "code"
    assert world.agentctls.connections == [(ENDPOINT, TOKEN)]
    starts = [args for call, args in world.agentctl.calls if call == "start"]
    assert len(starts) == 1
    assert starts[0][0].prompt == "hello"
    assert world.event_reasons() == ["PodCreated", "Pending", "Initializing", "Ready"], (
        "a short story: no Event per condition"
    )


async def test_a_second_reconcile_of_a_ready_session_does_nothing() -> None:
    world = World()
    await world.until_ready(prompt="hello")
    await world.reconcile()
    assert [v for v in world.kube.verbs() if not v.startswith(("get", "list"))] == []
    assert [call for call, _ in world.agentctl.calls if call == "start"] == []


async def test_suspend_deletes_exactly_the_observed_pod() -> None:
    world = World()
    await world.until_ready()
    uid = world.kubelet.pod()["metadata"]["uid"]
    await world.patch_spec(suspend=True)
    await world.reconcile()
    assert world.kube.find("Pod", NS, POD) is None
    assert f"delete Pod {POD}" in world.kube.verbs()
    assert ("Normal", "Suspending") in world.events()
    assert world.status()["phase"] == "Suspended"
    assert world.reasons()["Suspended"] == "Suspended"
    assert uid


@pytest.mark.parametrize(
    ("outlasts", "event", "words"),
    [
        (False, ("Normal", "TurnFinished"), "the running turn finished"),
        (
            True,
            ("Warning", "TurnCancelled"),
            "was cancelled through ACP; 1 pending permission request answered",
        ),
    ],
)
async def test_suspend_during_a_turn_drains_it_before_the_pod_goes(
    outlasts: bool, event: tuple[str, str], words: str
) -> None:
    world = World()
    await world.until_ready(lifecycle={"drainTimeout": "45s"})
    world.agentctl.turns.append(FakeTurn(hold=True, permission=PERMISSION_OPTIONS))
    world.agentctl.turn_outlasts_drain = outlasts
    await world.agentctl.prompt("a long piece of work")
    await world.patch_spec(suspend=True)
    await world.reconcile()
    assert ("drain", (45.0,)) in world.agentctl.calls
    assert world.kube.find("Pod", NS, POD) is None
    # The drain's outcome, then the pod's deletion.
    told = world.events()
    assert told.index(event) < told.index(("Normal", "Suspending"))
    assert words in world.event_messages()[told.index(event)]
    assert not world.agentctl.turn_running
    assert world.agentctl.journal[-1].kind == "drain"


async def test_suspend_of_an_idle_agent_drains_without_an_event_and_a_pending_one_not_at_all() -> None:
    world = World()
    await world.until_ready()
    await world.patch_spec(suspend=True)
    await world.reconcile()
    assert [call for call, _ in world.agentctl.calls].count("drain") == 1
    assert not {"TurnFinished", "TurnCancelled"} & {reason for _, reason in world.events()}

    # A session whose ACP never started has no turn to drain: its pod goes at once.
    never = World()
    await never.apply()
    await never.reconcile()
    await never.patch_spec(suspend=True)
    await never.reconcile()
    assert "drain" not in [call for call, _ in never.agentctl.calls]
    assert never.kube.find("Pod", NS, POD) is None


async def test_resume_loads_the_session_and_never_repeats_the_prompt() -> None:
    world = World()
    await world.until_ready(prompt="hello")
    first = world.status()["acp"]["sessionId"]
    await world.patch_spec(suspend=True)
    await world.reconcile()
    await world.patch_spec(suspend=False)
    await world.reconcile()
    assert world.status()["podsCreated"] == 2
    world.agentctl.restart()  # a new pod runs a new agentctl
    world.kubelet.run()
    await world.reconcile()
    start = [args[0] for call, args in world.agentctl.calls if call == "start"][-1]
    assert (start.session_id, start.prompt) == (first, None)
    assert world.status()["phase"] == "Ready"
    assert world.status()["acp"]["sessionId"] == first


async def test_a_lost_pod_is_recreated_with_a_warning() -> None:
    world = World()
    await world.until_ready()
    world.kubelet.lose_pod()
    await world.reconcile()
    assert world.kube.find("Pod", NS, POD) is not None
    assert ("Warning", "PodDeleted") in world.events()
    assert world.status()["podsCreated"] == 2


async def test_an_agentctl_restart_resumes_the_acp_session() -> None:
    world = World()
    await world.until_ready(prompt="hello")
    session_id = world.status()["acp"]["sessionId"]
    world.agentctl.restart()
    world.kubelet.run(restarts=1)
    await world.reconcile()
    start = [args[0] for call, args in world.agentctl.calls if call == "start"][-1]
    assert (start.session_id, start.prompt) == (session_id, None)
    assert world.status()["acp"]["agentctlRestartCount"] == 1
    assert world.status()["phase"] == "Ready"
    # The restart is told once, while ACP resumes, then the session is Ready again.
    assert world.event_reasons() == ["AgentctlRestarted", "Ready"]


async def test_an_agent_container_restart_resumes_the_acp_session() -> None:
    world = World()
    await world.until_ready(prompt="hello")
    session_id = world.status()["acp"]["sessionId"]
    assert world.status()["acp"]["agentRestartCount"] == 0
    world.kubelet.run(agent_restarts=1)
    await world.reconcile()
    start = [args[0] for call, args in world.agentctl.calls if call == "start"][-1]
    assert (start.session_id, start.prompt) == (session_id, None)
    assert world.status()["acp"]["agentRestartCount"] == 1
    assert world.status()["phase"] == "Ready"
    assert world.event_reasons() == ["AgentRestarted", "Ready"]
    assert "exit code 137" in world.event_messages()[0]


async def test_a_node_that_stops_reporting_leaves_the_session_unknown_until_it_is_back() -> None:
    world = World()
    await world.until_ready()
    world.kubelet.lose_node()
    await world.reconcile()
    assert world.status()["phase"] == "Unknown"
    ready = world.condition("Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeNotReady")
    assert "node node-1 stopped reporting" in ready["message"]
    assert world.events() == [("Warning", "NodeNotReady")]
    world.kubelet.run()
    await world.reconcile()
    assert world.status()["phase"] == "Ready"
    assert world.event_reasons() == ["NodeNotReady", "Ready"]
    # The agent ran on meanwhile: its ACP session goes on, nothing is started again.
    assert [call for call, _ in world.agentctl.calls if call == "start"] == []


async def test_a_failed_start_is_retried_after_the_configured_delay() -> None:
    world = World(start_retry_seconds=7.0)
    await world.apply()
    await world.reconcile()
    world.kubelet.run()
    world.agentctl.fail_next(AgentctlError("start", ENDPOINT, "agent did not answer", status=504))
    assert await world.reconcile() == 7.0
    assert world.reasons()["AgentInitialized"] == "InitializeFailed"
    assert "agent did not answer" in world.status()["acp"]["lastError"]
    assert await world.reconcile() is None
    assert world.status()["phase"] == "Ready"


async def test_idle_sessions_are_suspended_and_busy_ones_spared() -> None:
    world = World()
    await world.until_ready(lifecycle={"idleTimeout": "60s"})
    world.clock.now = datetime.now(UTC)
    world.agentctl.last_activity_at = world.clock.now - timedelta(seconds=20)
    assert await world.reconcile() == pytest.approx(40, abs=1)
    world.agentctl.turn_running = True
    world.agentctl.last_activity_at = world.clock.now - timedelta(seconds=600)
    assert await world.reconcile() == 60
    assert world.session()["spec"].get("suspend") is not True
    world.agentctl.turn_running = False
    await world.reconcile()
    assert world.session()["spec"]["suspend"] is True
    assert ("Normal", "IdleTimeout") in world.events()


async def test_an_agent_almost_idle_is_looked_at_again_a_second_later_not_at_once() -> None:
    world = World()
    await world.until_ready(lifecycle={"idleTimeout": "60s"})
    world.clock.now = datetime.now(UTC)
    world.agentctl.last_activity_at = world.clock.now - timedelta(seconds=59.8)
    # 0.2 s to go: a recheck that soon would spin on the API; at least a second keeps it calm.
    assert await world.reconcile() == 1.0
    assert world.session()["spec"].get("suspend") is not True


async def test_an_unreachable_agentctl_postpones_the_idle_check() -> None:
    world = World()
    await world.until_ready(lifecycle={"idleTimeout": "10m"})
    world.agentctl.fail_next(AgentctlError("status", ENDPOINT, "connection refused"), call="status")
    assert await world.reconcile() == 30.0
    assert world.session()["spec"].get("suspend") is not True


async def test_max_duration_suspends_for_good() -> None:
    world = World()
    await world.until_ready(lifecycle={"maxDuration": "1h"})
    world.kubelet.fail("DeadlineExceeded")
    await world.reconcile()
    assert world.session()["spec"]["suspend"] is True
    assert ("Normal", "MaxDurationReached") in world.events()
    assert world.status()["phase"] == "Failed"
    assert world.reasons()["Ready"] == "DeadlineExceeded"


async def test_a_failed_pod_is_replaced_unless_restart_policy_is_never() -> None:
    world = World()
    await world.until_ready()
    world.kubelet.fail("Evicted")
    await world.reconcile()
    assert ("Normal", "ReplacingFailedPod") in world.events()
    assert world.kube.find("Pod", NS, POD) is None

    never = World()
    await never.until_ready(lifecycle={"restartPolicy": "Never"})
    never.kubelet.fail("Evicted")
    await never.reconcile()
    assert never.kube.find("Pod", NS, POD) is not None
    assert never.status()["phase"] == "Failed"


async def test_a_pod_template_change_replaces_the_pod() -> None:
    world = World()
    await world.until_ready()
    await world.patch_spec(podTemplate={"labels": {"team": "blue"}})
    await world.reconcile()
    assert ("Normal", "PodSpecChanged") in world.events()
    await world.reconcile()
    assert world.kubelet.pod()["metadata"]["labels"]["team"] == "blue"


async def test_a_template_change_during_a_turn_waits_for_its_end() -> None:
    world = World()
    await world.until_ready()
    first = world.kubelet.pod()["metadata"]["uid"]
    world.agentctl.turns.append(FakeTurn(hold=True))
    await world.agentctl.prompt("a long piece of work")
    await world.patch_spec(podTemplate={"labels": {"team": "blue"}})
    # Looked at again soon, to see whether the turn has ended.
    assert await world.reconcile() == 2.0
    assert world.kubelet.pod()["metadata"]["uid"] == first
    pending = world.condition("RestartPending")
    assert (pending["status"], pending["reason"]) == ("True", "TurnRunning")
    assert "delete the pod to replace it now" in pending["message"]
    assert world.status()["phase"] == "Ready"
    assert "drain" not in [call for call, _ in world.agentctl.calls]

    world.agentctl.end_turn()
    await world.reconcile()
    assert ("Normal", "PodSpecChanged") in world.events()
    assert world.condition("RestartPending") is None
    await world.reconcile()
    assert world.kubelet.pod()["metadata"]["labels"]["team"] == "blue"


@pytest.mark.parametrize(
    ("status", "message", "reason", "phase"),
    [
        (422, 'Pod "s1-agent" is invalid: spec.containers[0].image: Required value', "PodRejected", "Failed"),
        (
            403,
            'pods "s1-agent" is forbidden: violates PodSecurity "restricted:latest"',
            "Forbidden",
            "Failed",
        ),
        (
            403,
            'pods "s1-agent" is forbidden: exceeded quota: q, requested: cpu=2',
            "QuotaExceeded",
            "Pending",
        ),
    ],
)
async def test_a_refused_pod_is_a_status_an_event_and_a_bounded_retry(
    status: int, message: str, reason: str, phase: str
) -> None:
    world = World()
    await world.apply()
    world.kube.refuse("create", "Pod", status, message, times=2)
    assert await world.reconcile() == 5.0
    assert world.status()["phase"] == phase
    assert world.reasons()["Ready"] == reason
    ready = next(c for c in world.status()["conditions"] if c["type"] == "Ready")
    assert message in ready["message"]
    assert ("Warning", reason) in world.events()
    world.clock.advance(60)
    assert await world.reconcile() == 60.0, "the retry backs off as the refusal lasts"
    world.clock.advance(60)
    await world.reconcile()
    assert world.kube.find("Pod", NS, POD) is not None
    assert world.status()["phase"] == "Pending"


async def test_a_refused_workspace_claim_stops_before_the_pod() -> None:
    world = World()
    await world.apply(workspace={"size": "1Gi"})
    world.kube.refuse(
        "create", "PersistentVolumeClaim", 422, "spec.resources.requests.storage: Invalid value"
    )
    await world.reconcile()
    assert world.reasons()["Ready"] == "WorkspaceRejected"
    assert world.kube.find("Pod", NS, POD) is None


async def test_an_outage_is_an_error_for_the_work_queue_not_a_status() -> None:
    world = World()
    await world.apply()
    world.kube.refuse("create", "Pod", 503, "etcdserver: leader changed")
    with pytest.raises(Exception, match="leader changed"):
        await world.reconcile()
    assert world.status() == {}


async def test_an_unparsable_spec_names_its_field() -> None:
    world = World()
    await world.apply(lifecycle={"restartPolicy": "Sometimes"})
    await world.reconcile()
    assert world.status()["phase"] == "Failed"
    ready = next(c for c in world.status()["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert ready["message"].startswith("spec.lifecycle.restartPolicy:")
    assert world.kube.find("Pod", NS, POD) is None


async def _probe_failed(world: World, container: str, message: str, at: str) -> None:
    pod = world.kubelet.pod()
    await world.kube.create({
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"p.{container}", "namespace": NS},
        "involvedObject": {"uid": pod["metadata"]["uid"], "fieldPath": container},
        "reason": "Unhealthy", "type": "Warning", "message": f"Readiness probe failed: {message}",
        "lastTimestamp": at,
    })  # fmt: skip


async def test_a_failing_readiness_probe_is_explained_by_the_kubelets_event() -> None:
    world = World()
    await world.apply()
    await world.reconcile()
    world.kubelet.run(agentctl_ready=False)
    await _probe_failed(
        world,
        "spec.initContainers{agentctl}",
        "HTTP probe failed with statuscode: 503",
        "2026-01-01T12:00:05Z",
    )
    # The agent container's probe, newer, says only that the agent has not answered yet.
    await _probe_failed(
        world, "spec.containers{agent}", "HTTP probe failed with statuscode: 418", "2026-01-01T12:00:06Z"
    )
    await world.reconcile()
    assert world.reasons()["AgentctlReady"] == "ProbeFailing"
    assert "statuscode: 503" in next(
        c["message"] for c in world.status()["conditions"] if c["type"] == "AgentctlReady"
    )


async def test_an_unready_agentctl_is_looked_at_again_until_the_kubelet_says_why() -> None:
    # The kubelet posts its Unhealthy Event apart from the pod's status, and often after it; no watch brings it.
    world = World()
    await world.apply()
    await world.reconcile()
    world.kubelet.run(agentctl_ready=False)
    assert await world.reconcile() == PROBE_RECHECK_SECONDS
    assert world.reasons()["AgentctlReady"] == "Starting"
    await _probe_failed(
        world, "spec.initContainers{agentctl}", "Get \"http://10.0.0.5:9999/health\": context deadline exceeded",
        "2026-01-01T12:00:05Z",
    )  # fmt: skip
    await world.reconcile()
    assert world.reasons()["AgentctlReady"] == "ProbeFailing"
    # Once it is ready, nothing is awaited.
    world.kubelet.run()
    assert await world.reconcile() != PROBE_RECHECK_SECONDS


async def test_a_deleted_session_creates_nothing_and_shows_terminating() -> None:
    world = World()
    await world.apply()
    await world.kube.patch(AGENT_SESSIONS, NS, NAME, {"metadata": {"finalizers": ["f"]}})
    await world.kube.delete(AGENT_SESSIONS, NS, NAME)
    await world.reconcile()
    assert world.status()["phase"] == "Terminating"
    assert world.kube.of_kind("Pod") == []
    assert world.kube.of_kind("Secret") == []


async def test_a_session_that_is_gone_is_forgotten() -> None:
    world = World()
    assert await world.reconcile() is None
    assert world.kube.verbs() == [f"get AgentSession {NAME}"]


async def test_a_pod_of_an_older_session_of_the_same_name_is_replaced() -> None:
    world = World()
    await world.apply()
    stale = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []},
             "metadata": {"name": POD, "namespace": NS, "labels": {"agentsession.dev/name": NAME},
                          "ownerReferences": [{"uid": "older"}]}}  # fmt: skip
    world.kube.put(stale)
    await world.reconcile()
    assert ("Normal", "StalePodReplaced") in world.events()
    assert world.kube.find("Pod", NS, POD) is None


async def test_children_left_by_an_older_session_of_the_same_name_are_replaced_not_taken() -> None:
    # Deleted and created again at once: the garbage collector has not deleted the older session's children yet.
    # Taking them would leave the session without them once it does, and nothing would bring them back.
    world = World()
    await world.apply(workspace={"size": "1Gi"})
    older = {"apiVersion": API_VERSION, "kind": KIND, "name": NAME, "uid": "older"}
    for kind, name in (("Secret", "s1-agentctl-token"), ("PersistentVolumeClaim", "s1-workspace")):
        world.kube.put({"apiVersion": "v1", "kind": kind, "data": {TOKEN_KEY: "b2xk"},
                        "metadata": {"name": name, "namespace": NS, "ownerReferences": [older]}})  # fmt: skip
    await world.reconcile()
    uid = world.session()["metadata"]["uid"]
    for kind, name in (("Secret", "s1-agentctl-token"), ("PersistentVolumeClaim", "s1-workspace")):
        child = world.kube.find(kind, NS, name)
        assert child is not None, f"no {kind} {name}"
        assert [ref["uid"] for ref in child["metadata"]["ownerReferences"]] == [uid], kind
    secret = world.kube.find("Secret", NS, "s1-agentctl-token")
    assert secret is not None
    assert base64.b64decode(secret["data"][TOKEN_KEY]).decode() == TOKEN
    assert world.status()["phase"] == "Pending"


def test_the_plan_lists_actions_in_order_and_starts_acp_only_when_due() -> None:
    config = OperatorConfig(image="agentsession:test")
    body = {
        "metadata": {"name": NAME, "namespace": NS, "uid": "u1", "generation": 1},
        "spec": {"prompt": "p"},
    }
    session = SessionView(body)
    spec = AgentSessionSpec.model_validate(body["spec"])
    desired = desired_pod(session.ref, spec, config, None)
    fresh = decide(Observed(session, spec, None, None, None, T0, desired=desired), config, lambda: "t")
    assert [type(a) for a in fresh.actions] == [CreateChild, CreateChild]
    assert [a.manifest["kind"] for a in fresh.actions if isinstance(a, CreateChild)] == ["Secret", "Pod"]
    suspended = AgentSessionSpec.model_validate({"suspend": True})
    observed = Observed(
        session, suspended, None, None, "t", T0, desired=desired_pod(session.ref, suspended, config, None)
    )
    assert decide(observed, config, lambda: "t").actions == ()
    assert not any(isinstance(a, StartAcp | Suspend | DeletePod) for a in fresh.actions)


async def test_a_pod_replaced_before_acp_started_gets_no_start_in_the_same_reconcile() -> None:
    world = World()
    await world.apply()
    await world.reconcile()
    world.kubelet.run()  # agentctl is ready: a start is due ...
    await world.patch_spec(podTemplate={"labels": {"team": "blue"}})  # ... but this pod is on its way out
    await world.reconcile()
    assert ("Normal", "PodSpecChanged") in world.events()
    assert "start" not in [call for call, _ in world.agentctl.calls]


async def test_a_spec_the_pod_builder_refuses_is_invalid_and_creates_no_pod() -> None:
    world = World(agent_profiles={"codex": AgentProfile(command=["codex-acp"])})
    await world.apply(agent={"type": "codex"})  # this operator knows no image for codex
    await world.reconcile()
    assert world.kube.find("Pod", NS, POD) is None
    assert world.reasons()["Ready"] == "InvalidSpec"
    assert "spec.agent.image" in world.condition("Ready")["message"]  # type: ignore[index]


async def test_a_pod_running_an_agentctl_image_no_longer_allowed_is_deleted_and_none_made() -> None:
    world = World(agentctl_images=["registry.example/agentctl:2"])
    await world.apply(agentctl={"image": "registry.example/agentctl:2"})
    await world.reconcile()
    world.kubelet.run()
    await world.reconcile()
    assert world.reasons()["Ready"] == "Ready"
    # An operator that no longer allows the image: the pod that runs it goes, nothing replaces it, and no drain asks
    # that agentctl anything.
    world.reconciler = Reconciler(
        OperatorConfig(image="agentsession:test"), world.kube, world.agentctls, world.pods_labelled,
        lambda namespace, stem: f"token-of-{namespace}-{stem}", clock=world.clock,
    )  # fmt: skip
    world.agentctl.calls.clear()
    await world.reconcile()
    assert ("Warning", "AgentctlImageRefused") in world.events()
    pod = world.kube.find("Pod", NS, POD)
    assert pod is None or pod["metadata"].get("deletionTimestamp")
    assert world.agentctl.calls == []
    # Once the pod is gone (the next reconcile, as its deletion's watch event brings), the status says why.
    await world.reconcile()
    assert world.kube.find("Pod", NS, POD) is None
    assert world.reasons()["Ready"] == "InvalidSpec"
    message = world.condition("Ready")["message"]  # type: ignore[index]
    assert message.startswith("spec.agentctl.image 'registry.example/agentctl:2' is not allowed")
    assert world.events().count(("Warning", "AgentctlImageRefused")) == 1


async def test_the_session_cwd_reaches_the_acp_start() -> None:
    world = World()
    await world.apply(cwd="/workspace/src")
    await world.reconcile()
    world.kubelet.run()
    await world.reconcile()
    start = next(args[0] for call, args in world.agentctl.calls if call == "start")
    assert start.cwd == "/workspace/src"


def test_activity_is_read_for_an_idle_timeout_or_a_template_change_of_a_started_session() -> None:
    config = OperatorConfig(image="agentsession:test")
    spec = AgentSessionSpec.model_validate({})
    ref_body: dict[str, Any] = {"metadata": {"name": NAME, "namespace": NS, "uid": "u1", "generation": 1}}
    session = SessionView({**ref_body, "spec": {}})
    pod = build_pod(session.ref, spec, config)
    pod["metadata"]["uid"] = "pod-1"
    started = {"phase": "Ready", "podUID": "pod-1", "acp": {"sessionId": "acp-1"}}
    started_session = SessionView({**ref_body, "spec": {}, "status": started})

    def wants_activity_of(view: SessionView, spec: AgentSessionSpec, pod: dict[str, Any]) -> bool:
        return wants_activity(view, spec, pod, desired_pod(view.ref, spec, config, None))

    # The pod is what the spec asks for and no idle timeout: nothing to read.
    assert not wants_activity_of(started_session, spec, pod)
    changed = AgentSessionSpec.model_validate({"podTemplate": {"labels": {"team": "blue"}}})
    assert wants_activity_of(started_session, changed, pod)
    # Not before ACP started, not for another pod, not while suspending.
    assert not wants_activity_of(session, changed, pod)
    other = SessionView({**ref_body, "spec": {}, "status": {**started, "podUID": "pod-0"}})
    assert not wants_activity_of(other, changed, pod)
    suspending = AgentSessionSpec.model_validate(
        {"podTemplate": {"labels": {"team": "blue"}}, "suspend": True}
    )
    assert not wants_activity_of(started_session, suspending, pod)
    idle = AgentSessionSpec.model_validate({"lifecycle": {"idleTimeout": "5m"}})
    assert wants_activity_of(started_session, idle, pod)


async def test_an_agentctl_that_does_not_answer_its_probe_is_not_asked_about_the_agent() -> None:
    # A frozen agentctl fails its probe, and the agent's probe, which goes through it, fails too. A call to it would
    # hold the reconcile, and the status it writes, until the call timed out.
    world = World()
    await world.until_ready()
    world.kubelet.run(agentctl_ready=False)
    pod = world.kubelet.pod()
    pod["status"]["containerStatuses"][0]["ready"] = False
    pod["status"]["conditions"].append(
        {"type": "ContainersReady", "status": "False", "lastTransitionTime": "2026-01-01T12:03:00Z"}
    )
    world.kube.put(pod)
    world.agentctl.calls.clear()
    await world.reconcile()
    assert world.agentctl.calls == []
    assert world.reasons()["AgentctlReady"] == "Starting"
    assert world.reasons()["AgentInitialized"] == "AgentctlNotReady"


async def test_an_agent_that_stops_answering_is_reported_with_agentctls_reason_and_recovers() -> None:
    world = World()
    await world.until_ready()
    world.agentctl.agent_state = "error"
    world.agentctl.last_error = (
        "agentctl lost the ACP connection to the agent: it stopped reading its messages"
    )
    pod = world.kubelet.pod()
    pod["status"]["containerStatuses"][0]["ready"] = False
    pod["status"]["conditions"].append(
        {"type": "ContainersReady", "status": "False", "lastTransitionTime": "2026-01-01T12:03:00Z"}
    )
    world.kube.put(pod)
    await world.reconcile()
    assert world.status()["phase"] == "Failed"
    initialized = world.condition("AgentInitialized")
    assert initialized is not None
    assert initialized["reason"] == "AgentNotAnswering"
    assert "it stopped reading its messages" in initialized["message"]
    assert world.events() == [("Warning", "AgentNotAnswering")]
    assert [call for call, _ in world.agentctl.calls if call == "start"] == []
    world.kubelet.run()  # agentctl got the agent answering again
    await world.reconcile()
    assert world.status()["phase"] == "Ready"


async def test_what_the_agent_says_of_itself_reaches_the_status_bounded() -> None:
    world = World()
    world.agentctl.available_modes = [
        SessionMode(id=f"mode-{i}", name="N" * 10_000, description="D" * 10_000) for i in range(1000)
    ]
    await world.until_ready()
    acp = world.status()["acp"]
    assert 0 < len(acp["availableModes"]) <= MODES_MAX
    assert len(json.dumps(acp)) < 2 * MODES_MAX_BYTES


class Counted:
    """Counts the calls of a function wherever a controller module imported it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, function: Any) -> None:
        self.calls = 0

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return function(*args, **kwargs)

        for module in list(sys.modules.values()):
            if (module.__name__ or "").startswith("agentsession.controller") and getattr(
                module, name, None
            ) is function:
                monkeypatch.setattr(module, name, counted)

    def take(self) -> int:
        calls, self.calls = self.calls, 0
        return calls


def status_writes(world: World) -> int:
    return world.kube.verbs().count(f"patch-status {KIND} {NAME}")


async def test_one_reconcile_builds_the_pod_once_and_maps_and_writes_the_status_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    builds = Counted(monkeypatch, "build_pod", build_pod)
    mappings = Counted(monkeypatch, "map_status", map_status)
    world = World()
    await world.until_ready()
    builds.take()
    mappings.take()
    # A template change of a started session: observe reads agentctl's activity for it and decide replaces the pod;
    # both need the pod the spec asks for now.
    await world.patch_spec(podTemplate={"labels": {"team": "blue"}})
    world.kube.calls.clear()
    await world.reconcile()
    assert ("Normal", "PodSpecChanged") in world.events()
    assert "status" in [call for call, _ in world.agentctl.calls]
    assert (builds.take(), mappings.take(), status_writes(world)) == (1, 1, 1)
    # The new pod, created from the same single build.
    world.kube.calls.clear()
    await world.reconcile()
    assert world.kubelet.pod()["metadata"]["labels"]["team"] == "blue"
    assert (builds.take(), mappings.take(), status_writes(world)) == (1, 1, 1)


async def test_a_reconcile_that_starts_acp_writes_the_status_before_the_start_as_its_plan_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plans: list[Plan] = []

    def recorded(*args: Any) -> Plan:
        plans.append(decide(*args))
        return plans[-1]

    monkeypatch.setattr(reconciler_module, "decide", recorded)
    world = World()
    await world.apply()
    await world.reconcile()
    world.kubelet.run()
    world.kube.calls.clear()
    await world.reconcile()
    assert [type(a) for a in plans[-1].actions] == [WriteStatus, StartAcp]
    assert status_writes(world) == 2
    # The first write, before the start: agentctl ready, ACP starting.
    assert world.event_reasons() == ["PodCreated", "Pending", "Initializing", "Ready"]
    assert world.status()["phase"] == "Ready"


def test_the_plan_writes_the_status_before_an_acp_start_that_is_due() -> None:
    config = OperatorConfig(image="agentsession:test")
    session = SessionView(
        {"metadata": {"name": NAME, "namespace": NS, "uid": "u1", "generation": 1}, "spec": {}}
    )
    spec = AgentSessionSpec()
    desired = desired_pod(session.ref, spec, config, None)
    assert isinstance(desired, dict)
    observed = Observed(session, spec, None, desired, "t", T0, desired=desired)
    assert decide(observed, config, lambda: "t").actions == ()
    due = decide(replace(observed, start_due=True), config, lambda: "t")
    assert [type(a) for a in due.actions] == [WriteStatus, StartAcp]


def test_decide_reads_the_observed_value_and_calls_no_status_mapper() -> None:
    source = Path(decisions_module.__file__).read_text()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert "agentsession.controller.status_mapper" not in imported
