"""Secrets stay put, on a node.

A session's agent gets a recognizable API key from a Secret (`spec.agent.credentialsSecretRef`, as agents get their
keys), runs its initial prompt and one through the gateway (a permission answered, the shell used); then neither that
key nor agentctl's token, nor their base64 forms, appears in the operator's log, the gateway's log, either
container's log, the session's status, the namespace's Events, any message a gateway client received, or agentctl's
journal (through the gateway and as files, which only agentctl's container mounts). The workspace shell, in
agentctl's container, cannot read agentctl's environment. The agent container has the key and nothing of the token: not in its environment, not in the files it
shares with agentctl, not through agentctl's processes, which it cannot see; and neither container has a service
account token.
"""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client
from tests.support.gateway import Client, gateway_process, initialize, of_type
from tests.support.kube import Sessions
from tests.support.pod_security import secret_references
from tests.support.processes import OperatorProcess

from agentsession.api.constants import AGENT_CONTAINER, AGENTCTL_CONTAINER, token_secret_name

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

TASK_DIALECT = "task-session.v1"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# What the agent container can find: its environment, every process it can see, and every file in the volumes it
# shares with agentctl (the workspace, the FIFO directory; FIFOs themselves are not read, which would block) and
# its own /tmp.
AGENT_LOOKS = f"""
echo "== environment"; env
echo "== processes"
for p in /proc/[0-9]*; do
  echo "-- $p $(tr '\\0' ' ' < $p/cmdline 2>/dev/null)"; tr '\\0' '\\n' < $p/environ 2>&1
done
echo "== files"
find /workspace /tmp /run/agentctl -type f 2>/dev/null | while read -r f; do echo "-- $f"; cat "$f" 2>&1; done
echo "== service account"; ls {SERVICE_ACCOUNT_DIR} 2>&1 || true
"""


SHELL_LOOKS = "env; tr '\\0' '\\n' < /proc/1/environ; echo end-of-$((6 * 7))\n"


def forms(secret: str) -> dict[str, str]:
    """The secret, its base64 (as in a Secret's data), and the characters it always gives in base64 whatever
    precedes it in a longer encoded text."""
    raw = secret.encode()
    found = {"as is": secret, "base64": base64.b64encode(raw).decode()}
    for offset in (1, 2):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        # The first characters mix in what came before, the last ones what comes after.
        found[f"base64 after {offset} bytes"] = encoded[4:-4]
    return found


def leaks(secrets: dict[str, str], where: dict[str, str]) -> list[str]:
    return [
        f"{name} ({form}) in {place}"
        for name, secret in secrets.items()
        for form, text in forms(secret).items()
        for place, haystack in where.items()
        if text in haystack
    ]


def run_in(kubectl: str, kubeconfig: str, pod: Any, container: str, script: str) -> str:
    """`kubectl exec` of a shell script in one container of the pod; its output and errors."""
    done = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "-n", pod.metadata.namespace, "exec", pod.metadata.name,
         "-c", container, "--", "sh", "-c", script],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, f"exec in {container} failed ({done.returncode}): {done.stderr[-2000:]}"
    return done.stdout + done.stderr


def section(output: str, title: str) -> str:
    return output.split(f"== {title}\n", 1)[1].split("\n== ", 1)[0]


async def test_neither_the_api_key_nor_the_agentctl_token_leaks(
    node_operator: OperatorProcess,
    sessions: Sessions,
    namespace: str,
    kubeconfig: str,
    kubectl: str,
    tmp_path: Path,
) -> None:
    key = f"sk-ant-test-{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}"
    sessions.core.create_namespaced_secret(
        namespace, client.V1Secret(metadata={"name": "model-keys"}, string_data={"ANTHROPIC_API_KEY": key})
    )
    spec = {"agent": {"type": "demo", "credentialsSecretRef": {"name": "model-keys"}}, "prompt": "hello"}
    sessions.create("keyed", spec)
    agent_id = f"{namespace}/keyed"
    args = ("--namespace", namespace, "--insecure-dev-mode")
    with gateway_process(kubeconfig, tmp_path / "gateway.log", *args) as gateway:
        async with aiohttp.ClientSession() as http:
            ui = Client(await http.ws_connect(gateway.ws_url))
            tasks = Client(await http.ws_connect(gateway.ws_url, protocols=(TASK_DIALECT,)))
            await sessions.until_ready("keyed")
            await initialize(ui, agent_id, "first")
            await ui.wait_for(
                "the initial turn's end", of_type("agent_status", agentId=agent_id, status="ready")
            )

            # A prompt whose turn asks for a permission, answered through the gateway.
            mark = len(ui.frames)
            await ui.send(
                {"type": "send_agent_message", "agentId": agent_id, "text": "write it, with permission"}
            )
            asked = await ui.wait_for(
                "the permission request", of_type("agent_permission_request"), since=mark
            )
            await ui.send({"type": "agent_permission_response", "agentId": agent_id,
                           "permissionId": asked["payload"]["permissionId"], "optionId": "allow"})  # fmt: skip
            await ui.wait_for(
                "the turn's end", of_type("agent_status", agentId=agent_id, status="ready"), since=mark
            )

            # The workspace shell (in agentctl's container) shows a gateway client its environment, and tries
            # agentctl's (agentctl is the container's first process).
            await tasks.request(
                {"id": "sub", "type": "request", "action": "task.subscribe", "payload": {"task_id": agent_id}},
                lambda f: f.get("action") == "task.session.agentctl_ready", "agentctl ready",
            )  # fmt: skip
            await tasks.request(
                {"id": "shell", "type": "request", "action": "shell.subscribe", "payload": {"task_id": agent_id}},
                lambda f: f.get("id") == "shell" and f.get("type") == "response", "the shell",
            )  # fmt: skip
            await tasks.send({"id": "in", "type": "request", "action": "shell.input",
                              "payload": {"task_id": agent_id, "data": SHELL_LOOKS}})  # fmt: skip
            await tasks.wait_for(
                "the shell's output",
                lambda f: f.get("action") == "shell.output" and "end-of-42" in f["payload"]["data"],
            )
            history = (await initialize(ui, agent_id, "last"))["updates"]
            received = ui.frames + tasks.frames
            await ui.close()
            await tasks.close()
        gateway_log = gateway.output()

    token = sessions.token("keyed")
    pod = sessions.pod("keyed")
    core = sessions.core
    events = core.api_client.sanitize_for_serialization(core.list_namespaced_event(namespace))
    agent_sees = run_in(kubectl, kubeconfig, pod, AGENT_CONTAINER, AGENT_LOOKS)
    agentctl_sa = run_in(
        kubectl, kubeconfig, pod, AGENTCTL_CONTAINER, f"ls {SERVICE_ACCOUNT_DIR} 2>&1 || true"
    )

    # What was searched holds what it should: the turns, the permission, the shell's environment, the journal.
    shell_output = "".join(f["payload"]["data"] for f in received if f.get("action") == "shell.output")
    assert "HOME=" in shell_output
    assert "/proc/1/environ: Permission denied" in shell_output
    assert "write it, with permission" in json.dumps(history)
    assert "agent_permission_resolved" in json.dumps(received)
    journal = run_in(kubectl, kubeconfig, pod, AGENTCTL_CONTAINER, "cat /var/lib/agentctl/state/*")
    assert "write it, with permission" in journal
    shared = section(agent_sees, "files")
    seen_files = [line for line in shared.splitlines() if line.startswith("-- /")]
    assert not [f for f in seen_files if f.endswith(("/history.jsonl", "/state.json"))], seen_files
    # The key reaches the agent, where it belongs: the search finds it there.
    assert leaks({"the API key": key}, {"the agent's environment": section(agent_sees, "environment")})

    everywhere = {
        "the operator's log": node_operator.output(),
        "the gateway's log": gateway_log,
        "agentctl's log": core.read_namespaced_pod_log(
            pod.metadata.name, namespace, container=AGENTCTL_CONTAINER
        ),
        "the agent's log": core.read_namespaced_pod_log(
            pod.metadata.name, namespace, container=AGENT_CONTAINER
        ),
        "the session": json.dumps(sessions.get("keyed")),
        "the namespace's Events": json.dumps(events),
        "the gateway's messages": json.dumps(received),
        "agentctl's history": json.dumps(history),
        "agentctl's journal": journal,
        "the files the agent shares with agentctl": shared,
    }
    assert leaks({"the API key": key, "agentctl's token": token}, everywhere) == []
    inside = {"the agent's environment": section(agent_sees, "environment"),
              "the processes the agent sees": section(agent_sees, "processes")}  # fmt: skip
    assert leaks({"agentctl's token": token}, inside) == []
    # The agent sees only its own container's processes: agentctl runs in another PID namespace.
    programs = [
        [word.rsplit("/", 1)[-1] for word in line.split(" ")[2:4]]
        for line in section(agent_sees, "processes").splitlines()
        if line.startswith("-- /proc/")
    ]
    assert any("agentsession-demo-agent" in words for words in programs), programs
    assert not any("agentctl" in words for words in programs), programs

    # No service account token in either container, and none asked for.
    assert "No such file or directory" in section(agent_sees, "service account")
    assert "No such file or directory" in agentctl_sa
    spec_json = core.api_client.sanitize_for_serialization(pod.spec)
    assert spec_json["automountServiceAccountToken"] is False
    assert "serviceAccountToken" not in json.dumps(spec_json["volumes"])
    # agentctl's token Secret reaches agentctl's environment and nothing else.
    assert secret_references(spec_json, token_secret_name("keyed")) == [
        ".initContainers[0].env[0].valueFrom.secretKeyRef"
    ]
    assert secret_references(spec_json, "model-keys") == [".containers[0].envFrom[0].secretRef"]
