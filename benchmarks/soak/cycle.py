"""One session's life in a soak run, as a client of the gateway sees it: create → Ready → a prompt → suspend →
resume → a prompt → delete → gone, with the reply and the history checked at each step.

What a cycle does (its prompts, how it resumes, its pauses) is drawn from the run's seeded generator before it
starts, so a seed replays the same choices. A step that does not happen within its bound, or a history that lost an
entry, ends the cycle with `CycleFailed`, which the driver records as a violation.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tests.support.gateway import Client, history_pages

from agentsession.api.constants import API_VERSION, KIND
from agentsession.api.views import SessionView
from agentsession.kube.client import Kube
from agentsession.kube.errors import NotFound
from agentsession.kube.resources import AGENT_SESSIONS
from benchmarks.soak.invariants import Snapshot, children, owner_uid

READY_WITHIN = 120.0  # a cold start on a busy node
STOP_WITHIN = 60.0  # an idle agent's pod goes in about 3 s
GONE_WITHIN = 120.0  # the finalizer, then the garbage collector for the Secret and the claim
TURN_WITHIN = 60.0  # a demo agent's turn takes milliseconds; the gateway's stream may reconnect first
GATEWAY_WITHIN = 30.0  # the gateway telling a change the API already shows (its watch may be reconnecting)
INIT_WITHIN = 150.0  # the gateway's own limit (120 s) for starting a suspended session, and a margin
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


class CycleFailed(Exception):
    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(detail)
        self.invariant = invariant
        self.detail = detail


class Context(Protocol):
    """What a cycle needs from the run: the API, fresh snapshots of the namespace, and gateway clients."""

    @property
    def kube(self) -> Kube: ...

    @property
    def namespace(self) -> str: ...

    async def until(self, what: str, probe: Callable[[Snapshot], bool], within: float) -> Snapshot: ...

    async def connect(self) -> Client: ...

    async def pause(self, seconds: float) -> None: ...

    def prompted(self) -> None: ...


@dataclass(frozen=True)
class Plan:
    name: str
    initial_prompt: str | None  # spec.prompt, sent once by the operator at the first start
    prompts: tuple[str, str]  # through the gateway: before the suspend, after the resume
    resume_through_gateway: bool  # an initialize_agent_request un-suspends it, else spec.suspend=false
    pauses: tuple[float, float, float]  # after the first prompt, while suspended, after the second prompt


def draw_plan(rng: random.Random, name: str) -> Plan:
    def text(turn: int) -> str:
        words = rng.sample(WORDS, rng.randint(1, 4))
        # "permission" makes the demo agent ask for one; the driver allows it.
        if rng.random() < 0.3:
            words.append("permission")
        # A last word of its own: its chunk ends the demo agent's reply ("You said: <the words>").
        return " ".join([*words, f"#{name}.{turn}"])

    return Plan(
        name=name,
        initial_prompt=text(0) if rng.random() < 0.5 else None,
        prompts=(text(1), text(2)),
        resume_through_gateway=rng.random() < 0.5,
        pauses=(rng.uniform(0.5, 4.0), rng.uniform(0.5, 4.0), rng.uniform(0.5, 4.0)),
    )


def session_in(snap: Snapshot, name: str) -> SessionView | None:
    return next((SessionView(s) for s in snap.sessions if s["metadata"]["name"] == name), None)


def children_in(snap: Snapshot, uid: str) -> list[str]:
    """The session's Pods, Secrets and claims, as "kind name"."""
    return [f"{kind} {c['metadata']['name']}" for kind, c in children(snap) if owner_uid(c) == uid]


def user_prompts(updates: list[dict[str, Any]]) -> list[str]:
    """The user's messages in a history, in order."""
    prompts = []
    for entry in updates:
        update = entry["notification"]["update"]
        if update["sessionUpdate"] == "user_message_chunk":
            prompts.append(update["content"]["text"])
    return prompts


def _payload(frame: dict[str, Any]) -> dict[str, Any]:
    payload = frame.get("payload")
    return payload if isinstance(payload, dict) else {}


def _status(agent: str, status: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: (
        f.get("type") == "agent_status"
        and _payload(f).get("agentId") == agent
        and (_payload(f).get("status") == status)
    )


def _answer_to(request_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: _payload(f).get("requestId") == request_id and f.get("type") != "agent_status"


def _chunks(entries: list[dict[str, Any]], agent: str) -> list[str]:
    """The agent's message chunks among history entries or `agent_update` payloads (the same shape)."""
    found = []
    for entry in entries:
        update = (entry.get("notification") or {}).get("update") or {}
        if entry.get("agentId") == agent and update.get("sessionUpdate") == "agent_message_chunk":
            found.append(str(update["content"].get("text", "")))
    return found


def _updates(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_payload(f) for f in frames if f.get("type") == "agent_update"]


def _index(client: Client, frame: dict[str, Any]) -> int:
    return next(i for i, f in enumerate(client.frames) if f is frame)


class Cycle:
    def __init__(self, ctx: Context, plan: Plan) -> None:
        self.ctx = ctx
        self.plan = plan
        self.name = plan.name
        self.agent = f"{ctx.namespace}/{plan.name}"
        self.expected: list[str] = [plan.initial_prompt] if plan.initial_prompt else []
        self.history: list[dict[str, Any]] = []
        self.requests = 0
        self.allowed: set[str] = set()  # permission requests answered
        self.error_frames: list[str] = []

    def _request_id(self, what: str) -> str:
        self.requests += 1
        return f"{self.name}.{what}.{self.requests}"

    async def run(self) -> None:
        # Connected before the session exists, so every status change of it reaches this client.
        ui = await self.ctx.connect()
        try:
            await self._create()
            await self._until_ready()
            first, at = await self._initialize(ui, "first")
            await self._until_idle(ui, "the first initialize", at, first, self.plan.initial_prompt)
            self._keep(first, "the first initialize")
            await self._prompt(ui, self.plan.prompts[0])
            await self.ctx.pause(self.plan.pauses[0])
            await self._suspend()
            await self._until_status(ui, "completed", "the gateway telling the suspend")
            await self.ctx.pause(self.plan.pauses[1])
            if self.plan.resume_through_gateway:
                resumed, at = await self._initialize(ui, "resume", within=INIT_WITHIN)
            else:
                await self._patch_suspend(False)
                await self._until_ready()
                resumed, at = await self._initialize(ui, "resume")
            await self._until_idle(ui, "the resume", at, resumed, None)
            self._keep(resumed, "the resume")
            await self._prompt(ui, self.plan.prompts[1])
            await self.ctx.pause(self.plan.pauses[2])
            await self.delete_and_wait()
            await self._until_status(ui, "killed", "the gateway telling the deletion")
        finally:
            self.error_frames = [
                json.dumps(f.get("payload"))[:300] for f in ui.frames if f.get("type") == "error"
            ]
            await ui.close()
        if self.error_frames:
            # The cycle sends nothing the gateway should refuse.
            raise CycleFailed("error-frame", "; ".join(self.error_frames))

    async def _create(self) -> None:
        spec: dict[str, Any] = {"agent": {"type": "demo"}, "workspace": {"size": "64Mi"}}
        if self.plan.initial_prompt:
            spec["prompt"] = self.plan.initial_prompt
        await self.ctx.kube.create(
            {"apiVersion": API_VERSION, "kind": KIND,
             "metadata": {"name": self.name, "namespace": self.ctx.namespace}, "spec": spec}
        )  # fmt: skip

    async def _until_ready(self) -> None:
        def ready(snap: Snapshot) -> bool:
            s = session_in(snap, self.name)
            return (
                s is not None
                and not s.suspended
                and s.status.observedGeneration == s.generation
                and s.condition_true("Ready")
            )

        await self.ctx.until(f"{self.name} Ready", ready, READY_WITHIN)

    async def _patch_suspend(self, suspend: bool) -> None:
        await self.ctx.kube.patch(
            AGENT_SESSIONS, self.ctx.namespace, self.name, {"spec": {"suspend": suspend}}
        )

    async def _suspend(self) -> None:
        await self._patch_suspend(True)

        def stopped(snap: Snapshot) -> bool:
            s = session_in(snap, self.name)
            return (
                s is not None
                and s.status.phase == "Suspended"
                and not any(kind.startswith("Pod ") for kind in children_in(snap, s.uid))
            )

        await self.ctx.until(f"{self.name} suspended with no pod", stopped, STOP_WITHIN)

    async def delete_and_wait(self) -> None:
        """Deletes the session (if it is still there) and waits until it and its children are gone."""
        try:
            found: SessionView | None = SessionView(
                await self.ctx.kube.get(AGENT_SESSIONS, self.ctx.namespace, self.name)
            )
        except NotFound:
            found = None
        uid = found.uid if found is not None else None
        if found is not None and not found.deleting:
            with contextlib.suppress(NotFound):
                await self.ctx.kube.delete(AGENT_SESSIONS, self.ctx.namespace, self.name, uid=uid)

        def gone(snap: Snapshot) -> bool:
            return session_in(snap, self.name) is None and not (uid and children_in(snap, uid))

        await self.ctx.until(f"{self.name} and its Pod, Secret and claim gone", gone, GONE_WITHIN)

    async def _initialize(
        self, ui: Client, what: str, within: float = 30.0
    ) -> tuple[list[dict[str, Any]], int]:
        """The history the gateway answers with (every page), and where its last page is among the client's
        frames: the live updates follow it."""
        rid = self._request_id(what)
        mark = len(ui.frames)
        await ui.send({"type": "initialize_agent_request", "agentId": self.agent, "requestId": rid})
        answer = await ui.wait_for(f"agent_initialized {rid}", _answer_to(rid), within, since=mark)
        if answer.get("type") != "agent_initialized":
            raise CycleFailed("cycle", f"initialize ({what}) answered {answer}")
        at = _index(ui, answer)
        history = await history_pages(ui, _payload(answer), since=at + 1, within=within)
        pages = [
            i
            for i, f in enumerate(ui.frames)
            if f.get("type") == "agent_history" and _payload(f).get("requestId") == rid
        ]
        return history, max([at, *pages])

    def _latest_status(self, ui: Client) -> str | None:
        """The agent's status in the last frame that told it: an `agent_status`, or an `agent_initialized`."""
        for frame in reversed(ui.frames):
            payload = _payload(frame)
            if payload.get("agentId") != self.agent:
                continue
            if frame.get("type") == "agent_status":
                return str(payload.get("status"))
            if frame.get("type") == "agent_initialized":
                return str(payload["info"]["status"])
        return None

    async def _until_idle(
        self, ui: Client, what: str, since: int, history: list[dict[str, Any]], reply_to: str | None
    ) -> None:
        """Until the gateway says `ready` (no turn running) and, for `reply_to`, the reply's last chunk arrived
        (in `history` or live since frame `since`). A turn's end is a `ready` after its `processing`; a turn that
        ended before its session was Ready (the initial prompt's, a few milliseconds long) never showed one."""
        last = reply_to.split()[-1] + " " if reply_to else None

        def idle() -> bool:
            if self._latest_status(ui) != "ready":
                return False
            return last is None or last in _chunks([*history, *_updates(ui.frames[since:])], self.agent)

        await self._until(ui, f"{what}: the end of the turn", idle, since, TURN_WITHIN, "cycle")

    async def _until_status(self, ui: Client, status: str, what: str) -> None:
        def told() -> bool:
            return self._latest_status(ui) == status

        await self._until(
            ui, f"{what}: status {status}", told, len(ui.frames), GATEWAY_WITHIN, "gateway-view"
        )

    async def _until(
        self, ui: Client, what: str, done: Callable[[], bool], since: int, within: float, invariant: str
    ) -> None:
        """Until `done()`, asked again at each frame the client receives; every permission the agent asks for
        from frame `since` on is allowed meanwhile."""
        deadline = time.monotonic() + within
        while True:
            await self._allow_permissions(ui, since)
            if done():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or ui.closed_code is not None:
                connection = "closed" if ui.closed_code is not None else "open"
                raise CycleFailed(
                    invariant,
                    f"{what} not within {within:.0f}s (the gateway's last status of it: "
                    f"{self._latest_status(ui)}; connection {connection})",
                )
            with contextlib.suppress(AssertionError):
                await ui.wait_for(what, lambda _: True, remaining, since=len(ui.frames))

    async def _allow_permissions(self, ui: Client, since: int) -> None:
        for frame in ui.frames[since:]:
            payload = _payload(frame)
            asked = str(payload.get("permissionId"))
            if frame.get("type") != "agent_permission_request" or payload.get("agentId") != self.agent:
                continue
            if asked in self.allowed:
                continue
            self.allowed.add(asked)
            await ui.send({"type": "agent_permission_response", "agentId": self.agent,
                           "permissionId": asked, "optionId": "allow"})  # fmt: skip

    def _keep(self, updates: list[dict[str, Any]], when: str) -> None:
        """The new history must begin with the whole previous one and hold every prompt once, in order."""
        if updates[: len(self.history)] != self.history:
            lost = next(i for i, old in enumerate(self.history) if i >= len(updates) or updates[i] != old)
            raise CycleFailed(
                "history",
                f"after {when} the history ({len(updates)} entries) no longer begins with the previous one "
                f"({len(self.history)} entries); first difference at entry {lost}",
            )
        prompts = user_prompts(updates)
        if prompts != self.expected:
            raise CycleFailed(
                "history", f"after {when} the prompts in the history are {prompts}, expected {self.expected}"
            )
        self.history = updates

    async def _prompt(self, ui: Client, text: str) -> None:
        rid = self._request_id("prompt")
        mark = len(ui.frames)
        await ui.send({"type": "send_agent_message", "agentId": self.agent, "text": text, "requestId": rid})
        answer = await ui.wait_for(f"ack of {rid}", _answer_to(rid), TURN_WITHIN, since=mark)
        if answer.get("type") != "ack":
            raise CycleFailed("cycle", f"prompt {text!r} answered {answer}")
        self.ctx.prompted()
        # The gateway's contract: a turn shows as `processing`, its updates, then `ready`.
        processing = _status(self.agent, "processing")
        await ui.wait_for(f"the turn of {rid}: processing", processing, TURN_WITHIN, since=mark)
        await self._until_idle(ui, f"the turn of {rid}", mark, [], text)
        reply = " ".join("".join(_chunks(_updates(ui.frames[mark:]), self.agent)).split())
        said = "You said: " + " ".join(text.split())
        if "permission" in text:
            said = "Permission outcome: selected allow. " + said
        if said not in reply:
            raise CycleFailed("reply", f"the reply to {text!r} was {reply!r}")
        self.expected.append(text)
        history, at = await self._initialize(ui, "history")
        await self._until_idle(ui, f"the history after {rid}", at, history, None)
        self._keep(history, f"the prompt {rid}")
