"""Acceptance 2: the task dialect over a `websockets` client: shell only after agentctl readiness."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.conftest import wait_until
from tests.support.kube import NOWHERE, Sessions
from tests.support.processes import OperatorProcess, agentctl_process

pytestmark = pytest.mark.cluster


class TaskClient:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []

    async def request(self, action: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        msg_id = uuid.uuid4().hex
        await self.ws.send(
            json.dumps({"id": msg_id, "type": "request", "action": action, "payload": payload or {}})
        )
        return await self.next(lambda f: f.get("id") == msg_id, f"answer to {action}")

    async def next(self, match: Any, what: str, within: float = 30.0) -> dict[str, Any]:
        for frame in self.frames:
            if match(frame):
                self.frames.remove(frame)
                return frame
        deadline = time.monotonic() + within
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no frame for {what}; kept {self.frames[-5:]}"
            frame = json.loads(await asyncio.wait_for(self.ws.recv(), remaining))
            assert set(frame) == {"id", "type", "action", "payload", "timestamp"}, frame
            if match(frame):
                return frame
            self.frames.append(frame)


async def test_shell_after_agentctl_ready(
    operator: OperatorProcess,
    sessions: Sessions,
    namespace: str,
    start_gateway: Any,
    agentctl_port: int,
    workdir: Path,
    tmp_path: Path,
) -> None:
    sessions.create("tasky", {"podTemplate": {"nodeSelector": NOWHERE}})
    wait_until("pod", lambda: sessions.pod("tasky"), timeout=30)
    gateway = start_gateway("--namespace", namespace, "--insecure-dev-mode")
    assert "INSECURE DEV MODE" in gateway.output()
    task_id = f"{namespace}/tasky"

    async with websockets.connect(gateway.ws_url, subprotocols=["task-session.v1"]) as ws:
        assert ws.subprotocol == "task-session.v1"
        tc = TaskClient(ws)
        sub = await tc.request("task.subscribe", {"task_id": task_id})
        assert sub["type"] == "response"
        assert sub["payload"]["success"] is True
        assert sub["payload"]["agentctl_ready"] is False

        early = await tc.request("shell.subscribe", {"task_id": task_id})
        assert early["type"] == "error"
        assert early["action"] == "shell.subscribe"
        assert early["payload"]["code"] == "AGENTCTL_NOT_READY"
        assert "not ready" in early["payload"]["message"]
        status = await tc.request("shell.status", {"task_id": task_id})
        assert status["payload"]["agentctl_ready"] is False

        token = sessions.token("tasky")
        with agentctl_process(workdir, token, tmp_path / "agentctl.log", port=agentctl_port):
            await asyncio.to_thread(sessions.play_kubelet, "tasky", agentctl_ready=True)
            ready = await tc.next(
                lambda f: f["action"] == "task.session.agentctl_ready", "agentctl_ready notification"
            )
            assert ready["type"] == "notification"
            assert ready["payload"] == {
                "task_id": task_id,
                "task_session_id": sessions.pod("tasky").metadata.uid,
            }

            shell = await tc.request("shell.subscribe", {"task_id": task_id})
            assert shell["type"] == "response", shell
            assert shell["payload"]["success"] is True
            assert shell["payload"]["task_id"] == task_id
            assert isinstance(shell["payload"]["buffer"], str)

            sent = await tc.request("shell.input", {"task_id": task_id, "data": "echo gateway-$((6*7))\n"})
            assert sent["type"] == "response"
            seen = ""
            while "gateway-42" not in seen:
                out = await tc.next(lambda f: f["action"] == "shell.output", "shell output")
                assert out["payload"]["task_id"] == task_id
                assert out["payload"]["type"] == "output"
                assert "code" in out["payload"]
                seen += out["payload"]["data"]
            status = await tc.request("shell.status", {"task_id": task_id})
            assert status["payload"]["agentctl_ready"] is True
            assert status["payload"]["running"] is True

            for raw, code in [
                ("[1,2", "BAD_REQUEST"),
                (json.dumps({"id": "u", "type": "request", "action": "task.fly", "payload": {}}), "UNKNOWN_ACTION"),
                (json.dumps({"id": "v", "type": "request", "action": "shell.input", "payload": {}}), "VALIDATION_ERROR"),
                (json.dumps({"id": "w", "type": "request", "action": "shell.input",
                             "payload": {"task_id": task_id, "data": 7}}), "VALIDATION_ERROR"),
                (json.dumps({"id": "x", "type": "request", "action": "task.subscribe",
                             "payload": {"task_id": f"{namespace}/ghost"}}), "NOT_FOUND"),
            ]:  # fmt: skip
                await ws.send(raw)
                err = await tc.next(lambda f: f["type"] == "error", f"error {code}")
                assert err["payload"]["code"] == code, err
                assert set(err["payload"]) == {"code", "message", "details"}
            assert (await tc.request("ping"))["type"] == "response"
