"""Real agents in real pods, through the operator and the gateway, against the model stub running in the cluster.

Each known agent type runs from its image (`make agent-images`) with the operator's default profile; the only
settings a test gives are the ones a user gives: `agent.type`, `agent.model.baseURL` (the stub's pod) and a
credentials Secret. A missing agent image skips its test, or fails it where `AGENTSESSION_REQUIRE_AGENTS` is set.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import websockets

from tests.conftest import _unavailable, image_present, wait_until
from tests.support.gateway import Client, GatewayProcess, gateway_process
from tests.support.gateway import initialize as gateway_initialize
from tests.support.kube import Sessions
from tests.support.model_stub import received_by
from tests.support.processes import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

STUB_PORT = 8080
FIRST_PROMPT = "hello from the first start"
READY_WITHIN = 240.0
TURN_WITHIN = 120.0


@dataclass(frozen=True)
class AgentCase:
    type: str
    image: str
    secret: dict[str, str]
    base_path: str
    """What follows the stub's address in `agent.model.baseURL`: each agent names its API root its own way."""
    always_loads: bool = True
    """gemini-cli 0.61 sometimes answers session/load with "No previous sessions found"; agentctl then goes on
    in a new ACP session, so only the history, not the session id, is sure to survive."""
    offers_modes: bool = True
    """Codex offers its mode presets only when its approval policy and sandbox are its own, not the profile's."""


CASES = {
    "claude-code": AgentCase(
        "claude-code", "agentsession-claude-code:dev", {"ANTHROPIC_API_KEY": "stub"}, ""
    ),
    "codex": AgentCase(
        "codex", "agentsession-codex:dev", {"OPENAI_API_KEY": "stub"}, "/v1", offers_modes=False
    ),
    "gemini": AgentCase(
        "gemini", "agentsession-gemini:dev", {"GEMINI_API_KEY": "stub"}, "", always_loads=False
    ),
}


def of_type(kind: str, **payload: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f.get("type") == kind and all(f["payload"].get(k) == v for k, v in payload.items())


def update_kind(frame: dict[str, Any]) -> str:
    return str(frame["payload"]["notification"]["update"]["sessionUpdate"])


def texts_of(updates: list[dict[str, Any]], kind: str) -> list[str]:
    """The text of each update of `kind` (`agent_message_chunk`, `user_message_chunk`) in these updates."""
    found = []
    for u in updates:
        update = u["notification"]["update"]
        content = update.get("content")
        if update["sessionUpdate"] == kind and isinstance(content, dict):
            found.append(content.get("text", ""))
    return found


def message_text(updates: list[dict[str, Any]]) -> str:
    """The agent's words in these updates, chunks joined."""
    return "".join(texts_of(updates, "agent_message_chunk"))


def user_prompts(updates: list[dict[str, Any]]) -> list[str]:
    return texts_of(updates, "user_message_chunk")


@pytest.fixture
def agent_case(request: pytest.FixtureRequest, kube_api: Any, kubeconfig: str) -> AgentCase:
    case = CASES[request.param]
    if not image_present(kube_api, kubeconfig, case.image):
        _unavailable(
            f"image {case.image} is not on the node: build and import it with `make agent-images`",
            require_env=("AGENTSESSION_REQUIRE_AGENTS",),
        )
    return case


@pytest.fixture
def stub_ip(sessions: Sessions, project_image: str) -> str:
    """The model stub as a pod of the project image in the test's namespace; its IP."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "model-stub", "labels": {"app.kubernetes.io/name": "model-stub"}},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "stub",
                    "image": project_image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["agentsession-model-stub", "--host", "0.0.0.0", "--port", str(STUB_PORT)],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": STUB_PORT},
                        "periodSeconds": 1,
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "readOnlyRootFilesystem": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
        },
    }
    sessions.core.create_namespaced_pod(sessions.namespace, pod)

    def ready_ip() -> str | None:
        status = sessions.core.read_namespaced_pod("model-stub", sessions.namespace).status
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
        return str(status.pod_ip) if ready else None

    return wait_until("the model stub pod Ready", ready_ip, timeout=120)


@pytest.fixture
def gateway(kubeconfig: str, crd_installed: list[str], namespace: str, tmp_path: Path) -> Any:
    with gateway_process(
        kubeconfig, tmp_path / "gateway.log", "--namespace", namespace, "--insecure-dev-mode"
    ) as running:
        yield running


@pytest.fixture
async def ui(gateway: GatewayProcess, http: aiohttp.ClientSession) -> AsyncIterator[Client]:
    """A lifecycle-dialect client of the gateway."""
    client = Client(await http.ws_connect(gateway.ws_url))
    yield client
    await client.close()


def create_agent_session(sessions: Sessions, case: AgentCase, stub_ip: str, name: str) -> float:
    """Applies a session the way a user would; returns when it was applied (monotonic)."""
    from kubernetes import client

    sessions.core.create_namespaced_secret(
        sessions.namespace, client.V1Secret(metadata={"name": f"{name}-keys"}, string_data=case.secret)
    )
    applied = time.monotonic()
    sessions.create(
        name,
        {
            "title": f"{case.type} against the model stub",
            "prompt": FIRST_PROMPT,
            "agent": {
                "type": case.type,
                "credentialsSecretRef": {"name": f"{name}-keys"},
                "model": {"baseURL": f"http://{stub_ip}:{STUB_PORT}{case.base_path}"},
            },
            "workspace": {"size": "1Gi"},
            # Stopping waits for the agent to exit; a short grace keeps suspend quick.
            "lifecycle": {"drainTimeout": "5s"},
        },
    )
    return applied


async def shell_listing(gateway: GatewayProcess, task_id: str) -> str:
    """`ls` of the workspace through the gateway's task dialect: the shell runs beside the agent."""
    marker = uuid.uuid4().hex[:8]
    async with websockets.connect(gateway.ws_url, subprotocols=["task-session.v1"]) as ws:

        async def request(action: str, payload: dict[str, Any]) -> dict[str, Any]:
            msg_id = uuid.uuid4().hex
            await ws.send(json.dumps({"id": msg_id, "type": "request", "action": action, "payload": payload}))
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if frame.get("id") == msg_id:
                    return frame

        subscribed = await request("shell.subscribe", {"task_id": task_id})
        assert subscribed["type"] == "response", subscribed
        # printf prints the marker without the line that typed it, so only the output can match.
        await request(
            "shell.input", {"task_id": task_id, "data": f"ls -1 /workspace; printf 'END-%s\\n' {marker}\n"}
        )
        seen = ""
        deadline = time.monotonic() + 30
        while f"END-{marker}" not in seen:
            assert time.monotonic() < deadline, f"no listing from the shell; got {seen[-500:]!r}"
            frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if frame.get("action") == "shell.output":
                seen += frame["payload"]["data"]
        return seen


def answer_to(request_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f["type"] in ("ack", "error") and f["payload"].get("requestId") == request_id


async def send_prompt(ui: Client, agent_id: str, text: str) -> int:
    """Sends a prompt once no turn is running (the initial prompt's may still be); returns the frame index
    from which its turn's frames follow."""
    for attempt in range(10):
        mark = len(ui.frames)
        request_id = f"prompt-{attempt}-{uuid.uuid4().hex[:8]}"
        answer = await ui.request(
            {"type": "send_agent_message", "agentId": agent_id, "text": text, "requestId": request_id},
            answer_to(request_id), "the prompt's ack",
        )  # fmt: skip
        if answer["type"] == "ack":
            return mark
        assert answer["payload"]["code"] == "conflict", answer
        await ui.wait_for(
            f"the running turn's end (attempt {attempt})", of_type("agent_status", status="ready"), TURN_WITHIN,
            since=mark,
        )  # fmt: skip
    raise AssertionError(f"the agent stayed busy; prompt {text!r} was never accepted")


async def prompt_turn(ui: Client, agent_id: str, text: str) -> list[dict[str, Any]]:
    """Sends a prompt and returns the updates of its turn once the agent is ready again."""
    mark = await send_prompt(ui, agent_id, text)
    processing = await ui.wait_for(
        "processing", of_type("agent_status", status="processing"), TURN_WITHIN, since=mark
    )
    # The end of this turn comes after its start: frames of the initial prompt's turn (its last updates, its
    # "ready") can still arrive after the new prompt was accepted.
    started = next(i for i in range(mark, len(ui.frames)) if ui.frames[i] is processing)
    await ui.wait_for(
        "ready after the turn", of_type("agent_status", status="ready"), TURN_WITHIN, since=started + 1
    )
    return [f["payload"] for f in ui.frames[mark:] if f["type"] == "agent_update"]


async def answer_permission(ui: Client, agent_id: str, text: str, kind: str) -> list[dict[str, Any]]:
    """A prompt whose tool call asks for permission, answered with the option of `kind`."""
    mark = await send_prompt(ui, agent_id, text)
    asked = await ui.wait_for(
        "permission request", of_type("agent_permission_request"), TURN_WITHIN, since=mark
    )
    request = asked["payload"]
    option = next((o for o in request["options"] if o.get("kind") == kind), None)
    assert option is not None, f"no {kind} option among {request['options']}"
    await ui.send({"type": "agent_permission_response", "agentId": agent_id,
                   "permissionId": request["permissionId"], "optionId": option["optionId"]})  # fmt: skip
    resolved = await ui.wait_for("permission resolved", of_type("agent_permission_resolved"), since=mark)
    assert resolved["payload"]["outcome"] == {"outcome": "selected", "optionId": option["optionId"]}
    await ui.wait_for(
        "ready after the turn", of_type("agent_status", status="ready"), TURN_WITHIN, since=mark
    )
    return [f["payload"] for f in ui.frames[mark:] if f["type"] == "agent_update"]


async def initialize(ui: Client, agent_id: str, request_id: str) -> dict[str, Any]:
    return await gateway_initialize(ui, agent_id, request_id, within=READY_WITHIN)


@pytest.mark.parametrize("agent_case", list(CASES), indirect=True)
async def test_a_real_agent_runs_end_to_end(
    agent_case: AgentCase,
    node_operator: OperatorProcess,
    sessions: Sessions,
    namespace: str,
    stub_ip: str,
    gateway: GatewayProcess,
    ui: Client,
    http: aiohttp.ClientSession,
) -> None:
    name = "real"
    agent_id = f"{namespace}/{name}"
    applied = create_agent_session(sessions, agent_case, stub_ip, name)
    await asyncio.to_thread(
        wait_until, "Ready=True", lambda: sessions.has_condition(name, "Ready", "True"), READY_WITHIN
    )
    print(f"\n{agent_case.type}: apply -> Ready {time.monotonic() - applied:.1f}s")
    status = sessions.get(name)["status"]
    session_id = status["acp"]["sessionId"]
    assert session_id
    assert bool(status["acp"].get("availableModes")) == agent_case.offers_modes, status["acp"]

    first = await initialize(ui, agent_id, "init-1")
    assert first["info"]["sessionId"] == session_id
    assert FIRST_PROMPT in user_prompts(first["updates"])
    # A prompt streams text.
    updates = await prompt_turn(ui, agent_id, "say something")
    assert "Hello from the model stub. You said: say something" in message_text(updates)
    assert sum(update_kind({"payload": u}) == "agent_message_chunk" for u in updates) > 1, (
        "streamed in chunks"
    )

    # A tool call that needs permission: allowed, the file appears; rejected, it does not.
    await answer_permission(ui, agent_id, "please write allowed.txt", "allow_once")
    await answer_permission(ui, agent_id, "please write rejected.txt", "reject_once")
    listing = await shell_listing(gateway, agent_id)
    assert "allowed.txt" in listing
    assert "rejected.txt" not in listing

    # Cancel mid-turn: the turn ends long before the slow reply would.
    mark = await send_prompt(ui, agent_id, "be slow")
    await ui.wait_for(
        "the first slow chunk",
        lambda f: f.get("type") == "agent_update" and update_kind(f) == "agent_message_chunk",
        TURN_WITHIN,
        since=mark,
    )
    await ui.send({"type": "cancel_agent_turn", "agentId": agent_id})
    await ui.wait_for("ready after cancel", of_type("agent_status", status="ready"), 30, since=mark)
    history_before = (await initialize(ui, agent_id, "init-2"))["updates"]

    # Suspend, then resume in a new pod: session/load, the initial prompt not sent again, history whole.
    pod_uid = status["podUID"]
    suspending = time.monotonic()
    sessions.patch_spec(name, {"suspend": True})
    await asyncio.to_thread(wait_until, "the pod gone", lambda: sessions.pod_gone(name, pod_uid), 120)
    print(f"{agent_case.type}: suspend of an idle session -> pod gone {time.monotonic() - suspending:.1f}s")
    await asyncio.to_thread(
        wait_until, "Suspended", lambda: sessions.get(name).get("status", {}).get("phase") == "Suspended", 120
    )
    sessions.patch_spec(name, {"suspend": False})
    await asyncio.to_thread(
        wait_until,
        "Ready=True in a new pod",
        lambda: (
            sessions.has_condition(name, "Ready", "True")
            and sessions.get(name)["status"]["podUID"] != pod_uid
        ),
        READY_WITHIN,
    )
    resumed = await initialize(ui, agent_id, "init-3")
    if agent_case.always_loads:
        assert sessions.get(name)["status"]["acp"]["sessionId"] == session_id
        assert resumed["info"]["sessionId"] == session_id
    assert resumed["updates"][: len(history_before)] == history_before, "history survives the new pod"
    assert user_prompts(resumed["updates"]).count(FIRST_PROMPT) == 1
    after = await prompt_turn(ui, agent_id, "after the resume")
    assert "You said: after the resume" in message_text(after)
    first_prompts = [
        r
        for r in await received_by(http, f"http://{stub_ip}:{STUB_PORT}")
        if r["kind"] == "prompt" and r["text"] == FIRST_PROMPT
    ]
    assert len(first_prompts) == 1, "the initial prompt reached the model once, across the resume"
