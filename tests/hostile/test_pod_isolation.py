"""A hostile agent against what agentctl keeps from it, on a node.

The agent runs in its own container, but until agentctl's state left its reach it shared agentctl's uid, the
workspace holding agentctl's journal, and `/tmp`, agentctl's HOME. From inside the agent container (`kubectl exec`,
as the agent's own user) each test does what a hostile agent would: it looks for agentctl's journal everywhere it
can see and rewrites the user's words in it, plants shell profiles where the human terminal might read them,
writes into every directory the terminal's environment names, and fills its disk. A tenant asks for an agentctl
image of its own. The bound: the history users read is agentctl's alone, the terminal runs nothing the agent wrote,
an agent that fills its disk is evicted by its own limits, and a foreign agentctl image is refused with a status
that says why; while history and the workspace outlive the pod with a PVC, a warm-pool claim and an upgrade from
the layout before.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from agentsession.agentctl_client import AgentctlClient
from agentsession.api.constants import AGENT_CONTAINER, AGENTCTL_CONTAINER
from agentsession.contract.wire import HistoryResponse
from tests.conftest import wait_until
from tests.support.kube import Pools, Sessions
from tests.support.processes import OperatorProcess, operator_process

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

FORGED = "words-the-user-never-wrote"
PLANTED = "planted-profile-ran"
MARK = "agent-was-here"
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PROMPT = "hello from the user"
# Every file a login shell (bash or sh) reads from HOME, planted in each place the agent can write that a HOME
# might be: its own /tmp and HOME, and the workspace.
PROFILES = (".bash_profile", ".bash_login", ".profile", ".bashrc")
PLANT = f"""
for d in /tmp "$HOME" "$PWD"; do
  for f in {" ".join(PROFILES)}; do echo "echo {PLANTED}-$f-in-$d" > "$d/$f"; done
done
"""
# Every journal the agent can find, rewritten: the user's prompt becomes words of the agent's choosing.
FORGE = f"""
find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \\( -name 'history.jsonl' -o -name state.json \\) \
  -print 2>/dev/null | while read -r f; do
  echo "found $f"
  if sed -i 's/{PROMPT}/{FORGED}/' "$f" 2>/dev/null; then echo "rewrote $f"; fi
done
echo forge-done
"""


def exec_in(kubectl: str, kubeconfig: str, namespace: str, pod: str, container: str, script: str) -> str:
    """`kubectl exec` of a shell script in one container of the pod, as that container's user."""
    done = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "exec", pod, "-c", container, "--",
         "sh", "-c", script],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"exec in {container} failed ({done.returncode}): {done.stderr[-2000:]}"
    return done.stdout + done.stderr


class Pod:
    """A session's pod as the tests reach into it: its containers by exec, its agentctl by the session's token."""

    def __init__(self, sessions: Sessions, name: str, kubectl: str, kubeconfig: str) -> None:
        self.sessions, self.name = sessions, name
        self._kubectl, self._kubeconfig = kubectl, kubeconfig

    def run(self, container: str, script: str) -> str:
        pod = self.sessions.pod(self.name).metadata.name
        return exec_in(self._kubectl, self._kubeconfig, self.sessions.namespace, pod, container, script)

    def agent(self, script: str) -> str:
        return self.run(AGENT_CONTAINER, script)

    @asynccontextmanager
    async def agentctl(self) -> AsyncIterator[AgentctlClient]:
        endpoint = self.sessions.get(self.name)["status"]["agentctlEndpoint"]
        async with aiohttp.ClientSession() as http:
            yield AgentctlClient(http, endpoint, self.sessions.token(self.name))

    async def history(self) -> HistoryResponse:
        async with self.agentctl() as agentctl:
            return await agentctl.history()

    async def messages(self) -> list[tuple[str, str]]:
        """(kind, text) of each message chunk in the history agentctl serves: what users read."""
        found = []
        for entry in (await self.history()).updates:
            update = (entry.notification or {}).get("update") or {}
            content = update.get("content") or {}
            if entry.kind == "session_update" and isinstance(content, dict) and "text" in content:
                found.append((str(update.get("sessionUpdate")), str(content["text"])))
        return found

    async def turn_ended(self) -> None:
        async def ended() -> bool:
            return any(e.kind == "turn_end" for e in (await self.history()).updates)

        await until("the first turn's end", ended)

    async def terminal(self, script: str, wait_s: float = 60.0) -> str:
        """The human terminal's output for `script`, up to a marker that only its running prints, as lines
        without the terminal's control sequences."""
        output = ""
        async with self.agentctl() as agentctl, agentctl.shell() as shell:
            await shell.send_input(f"{script}\necho end-of-$((6 * 7))\n")
            async with asyncio.timeout(wait_s):
                async for frame in shell.frames():
                    output += frame.data or ""
                    if "end-of-42" in output:
                        break
        return CONTROL.sub("", output).replace("\r", "")


async def until(what: str, probe: Any, wait_s: float = 90.0) -> None:
    """Awaits an async `probe` until it is true; agentctl may still be starting, so its errors are retried."""
    deadline = asyncio.get_running_loop().time() + wait_s
    last: BaseException | None = None
    while asyncio.get_running_loop().time() < deadline:
        try:
            if await probe():
                return
        except Exception as error:  # not yet: agentctl restarting, the pod being replaced
            last = error
        await asyncio.sleep(0.5)
    pytest.fail(f"timed out after {wait_s:.0f}s waiting for {what}; last error: {last!r}", pytrace=False)


# The module's own operator and namespaces: another run's operator serving the usual `t-*` ones, on a shared
# cluster, would otherwise build these sessions' pods its way. Its scratch workspaces are small enough to fill.
NAMESPACES = "pod-isolation-"
WORKSPACE_LIMIT = "32Mi"
FILL_MIB = 64


@pytest.fixture(scope="module")
def isolation_operator(
    kubeconfig: str, crd_installed: list[str], project_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    settings = {
        "image": project_image,
        "image_pull_policy": "IfNotPresent",
        "workspace_size_limit": WORKSPACE_LIMIT,
    }
    with operator_process(kubeconfig, log, namespaces=json.dumps([f"{NAMESPACES}*"]), **settings) as running:
        yield running


@pytest.fixture
def sessions(kube_api: Any, request: pytest.FixtureRequest) -> Iterator[Sessions]:
    """Sessions in a fresh namespace of the module's, Pod Security `restricted` enforced, deleted after."""
    core = client.CoreV1Api(kube_api)
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).removeprefix("test-")[:30].strip("-")
    namespace = f"{NAMESPACES}{base}-{uuid.uuid4().hex[:6]}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    core.create_namespace({"metadata": {"name": namespace, "labels": labels}})
    try:
        wait_until(
            "the default service account", lambda: core.read_namespaced_service_account("default", namespace)
        )
        yield Sessions(kube_api, namespace)
    finally:
        core.delete_namespace(namespace)


@pytest.fixture
def pod_of(sessions: Sessions, kubectl: str, kubeconfig: str) -> Any:
    return lambda name: Pod(sessions, name, kubectl, kubeconfig)


async def suspend_and_resume(sessions: Sessions, name: str) -> None:
    uid = sessions.pod(name).metadata.uid
    sessions.patch_spec(name, {"suspend": True})
    await asyncio.to_thread(wait_until, "the pod gone", lambda: sessions.pod_gone(name, uid), 120)
    sessions.patch_spec(name, {"suspend": False})
    await sessions.until_ready(name)


async def test_the_agent_cannot_find_or_rewrite_the_history_users_read(
    isolation_operator: OperatorProcess, sessions: Sessions, pod_of: Any
) -> None:
    sessions.create("forged", {"prompt": PROMPT})
    await sessions.until_ready("forged")
    pod = pod_of("forged")
    await pod.turn_ended()

    attack = pod.agent(FORGE)
    after = await pod.messages()
    print(f"\nthe agent's search and rewrite:\n{attack}history as served: {after}")
    assert "forge-done" in attack
    assert "found" not in attack, "the agent can see agentctl's journal or session record"
    assert ("user_message_chunk", PROMPT) in after
    assert FORGED not in json.dumps(after)
    # The journal is where agentctl keeps it, with the user's words, out of the agent's mounts.
    journal = pod.run(AGENTCTL_CONTAINER, "cat /var/lib/agentctl/state/history.jsonl")
    assert PROMPT in journal
    mounts = pod.agent("cat /proc/self/mountinfo")
    assert "/var/lib/agentctl" not in mounts
    assert " /workspace " in mounts


async def test_profiles_the_agent_plants_do_not_run_in_the_terminal_and_nothing_it_names_is_the_agents(
    isolation_operator: OperatorProcess, sessions: Sessions, pod_of: Any
) -> None:
    sessions.create("planted", {})
    await sessions.until_ready("planted")
    pod = pod_of("planted")
    pod.agent(PLANT)
    opened = await pod.terminal('echo "HOME=$HOME"; env')
    print(f"\nthe terminal's first output:\n{opened}")
    assert PLANTED not in opened
    assert "HOME=/var/lib/agentctl/home" in opened

    # Every directory the terminal's environment names (HOME, each PATH entry, any other absolute path) and its
    # /tmp: the agent writes a mark into each it can, and the terminal looks for the marks. The workspace is
    # shared on purpose and is the terminal's working directory, nothing more.
    env = dict(line.split("=", 1) for line in opened.splitlines() if "=" in line and " " not in line)
    places = {"/tmp", env["HOME"], *env["PATH"].split(":")}
    places.update(v for n, v in env.items() if v.startswith("/") and n not in ("PWD", "OLDPWD", "PATH", "_"))
    places = {p for p in places if p != "/workspace" and not p.startswith("/workspace/")}
    mark = f"{MARK}-{uuid.uuid4().hex[:8]}"
    listing = " ".join(f"'{p}'" for p in sorted(places))
    pod.agent(f'for d in {listing}; do (echo x > "$d/{mark}") 2>/dev/null; done; true')
    seen = await pod.terminal(f'for d in {listing}; do [ -e "$d/{mark}" ] && echo "SEEN:$d"; done')
    print(f"places the terminal's environment names: {sorted(places)}")
    assert "SEEN:/" not in seen, seen
    # Nor does the terminal's PATH name the workspace or a relative directory (the working directory).
    assert all(part.startswith("/") and not part.startswith("/workspace") for part in env["PATH"].split(":"))


async def test_the_human_terminal_and_the_agent_both_edit_the_workspace(
    isolation_operator: OperatorProcess, sessions: Sessions, pod_of: Any
) -> None:
    sessions.create("shared", {})
    await sessions.until_ready("shared")
    pod = pod_of("shared")
    # The agent runs under its wrapper's umask; an exec starts with the image's, so it takes the agent's.
    umasks = pod.agent("for p in 1 $(cat /proc/1/task/1/children); do grep Umask /proc/$p/status; done")
    assert umasks.split() == ["Umask:", "0002", "Umask:", "0002"], umasks
    pod.agent("umask 002; mkdir -p /workspace/src && echo agent > /workspace/src/file.txt")
    edited = await pod.terminal(
        "echo human >> /workspace/src/file.txt && echo human > /workspace/src/new.txt && echo EDITED"
    )
    assert "\nEDITED\n" in edited, edited
    shown = pod.agent("cat /workspace/src/file.txt && echo agent-again >> /workspace/src/new.txt && echo OK")
    assert shown.split() == ["agent", "human", "OK"]
    assert "agent-again" in await pod.terminal("cat /workspace/src/new.txt")


async def test_history_and_the_workspace_survive_a_new_pod_on_a_persistent_volume(
    isolation_operator: OperatorProcess, sessions: Sessions, pod_of: Any
) -> None:
    sessions.create("kept", {"prompt": PROMPT, "workspace": {"size": "64Mi"}})
    await sessions.until_ready("kept")
    pod = pod_of("kept")
    await pod.turn_ended()
    before = await pod.history()
    pod.agent("echo work > /workspace/kept.txt")
    await pod.terminal("echo 'echo " + PLANTED + "' > ~/.bash_profile")  # the human's own profile, kept too

    step = next(s for s in sessions.pod("kept").status.init_container_statuses if s.name == "layout")
    print(f"\nthe layout step: {step.state.terminated.started_at} to {step.state.terminated.finished_at}")
    await suspend_and_resume(sessions, "kept")
    after = await pod.history()
    assert after.journal_id == before.journal_id
    assert [e.seq for e in after.updates][: len(before.updates)] == [e.seq for e in before.updates]
    assert ("user_message_chunk", PROMPT) in await pod.messages()
    assert pod.agent("cat /workspace/kept.txt").strip() == "work"
    assert pod.agent(FORGE).count("found") == 0
    assert PLANTED in await pod.terminal("true")


async def test_a_claimed_warm_pod_keeps_its_history_out_of_the_agents_reach(
    isolation_operator: OperatorProcess, sessions: Sessions, pod_of: Any, kube_api: Any
) -> None:
    pools = Pools(kube_api, sessions.namespace)
    template = {"agent": {"type": "demo"}, "workspace": {"size": "64Mi"}}
    pools.create("warm", replicas=1, template=template)
    await pools.until_ready("warm", 1)
    sessions.create("claimer", {"poolRef": {"name": "warm"}, "workspace": {"size": "64Mi"}, "prompt": PROMPT})
    await sessions.until_ready("claimer")
    assert sessions.get("claimer")["status"]["startup"]["source"] == "Claimed"
    pod = pod_of("claimer")
    await pod.turn_ended()
    assert pod.agent(FORGE).count("found") == 0
    before = await pod.history()

    await suspend_and_resume(sessions, "claimer")
    after = await pod.history()
    assert after.journal_id == before.journal_id
    assert ("user_message_chunk", PROMPT) in await pod.messages()


def _populate_old_layout(sessions: Sessions, claim: str, project_image: str) -> None:
    """A workspace as an operator before this layout left it: the files at the volume's root, agentctl's state in
    `.agentctl`, everything the one uid's, written with umask 022."""
    entries = [
        {"seq": 1, "timestamp": "2026-01-01T00:00:00.000Z", "kind": "session_update",
         "notification": {"sessionId": "old", "update": {"sessionUpdate": "user_message_chunk",
                                                         "content": {"type": "text", "text": "before the upgrade"}}}},
        {"seq": 2, "timestamp": "2026-01-01T00:00:01.000Z", "kind": "turn_end",
         "notification": {"sessionId": "old", "stopReason": "end_turn"}},
    ]  # fmt: skip
    journal = " ".join(shlex.quote(json.dumps(e, separators=(",", ":"))) for e in entries)
    script = (
        "set -e; umask 022; cd /volume; echo old work > README.md; mkdir -p .home src .agentctl; "
        "echo code > src/main.py; echo 'echo old-profile' > .home/.profile; "
        f"printf '%s\\n' {journal} > .agentctl/history.jsonl; echo 0123456789abcdef > .agentctl/history.jsonl.id"
    )
    security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    sessions.core.create_namespaced_persistent_volume_claim(
        sessions.namespace,
        {"metadata": {"name": claim}, "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "64Mi"}}}},
    )  # fmt: skip
    sessions.core.create_namespaced_pod(
        sessions.namespace,
        {"metadata": {"name": "old-operator"}, "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False,
            "securityContext": {"fsGroup": 65532},
            "containers": [{"name": "write", "image": project_image, "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", script], "securityContext": security,
                            "volumeMounts": [{"name": "w", "mountPath": "/volume"}]}],
            "volumes": [{"name": "w", "persistentVolumeClaim": {"claimName": claim}}]}},
    )  # fmt: skip

    def written() -> bool:
        phase = sessions.core.read_namespaced_pod("old-operator", sessions.namespace).status.phase
        assert phase != "Failed", "the pod writing the old layout failed"
        return bool(phase == "Succeeded")

    wait_until("the old layout written", written, 120)
    sessions.core.delete_namespaced_pod("old-operator", sessions.namespace, grace_period_seconds=0)


async def test_a_workspace_of_the_layout_before_is_moved_once_and_keeps_its_history(
    isolation_operator: OperatorProcess, sessions: Sessions, pod_of: Any, project_image: str
) -> None:
    _populate_old_layout(sessions, "upgraded-workspace", project_image)
    sessions.create("upgraded", {"workspace": {"size": "64Mi"}, "prompt": PROMPT})
    await sessions.until_ready("upgraded")
    pod = pod_of("upgraded")
    await until("the new turn's end", lambda: _turns_ended(pod, 2))
    messages = await pod.messages()
    assert messages[0] == ("user_message_chunk", "before the upgrade")
    assert ("user_message_chunk", PROMPT) in messages
    seqs = [e.seq for e in (await pod.history()).updates]
    assert seqs == list(range(1, len(seqs) + 1)), "the journal goes on where the old one stopped"
    assert pod.agent("cat /workspace/README.md /workspace/src/main.py").split() == ["old", "work", "code"]
    assert pod.agent(FORGE).count("found") == 0
    assert "old-profile" in pod.agent("sh -c '. \"$HOME/.profile\"'")
    # The terminal's user edits the files the one uid wrote before.
    edited = await pod.terminal("echo more >> /workspace/README.md && echo EDITED")
    assert "\nEDITED\n" in edited, edited

    # Moved once: a new pod finds the new layout and moves nothing again.
    await suspend_and_resume(sessions, "upgraded")
    assert pod.agent("cat /workspace/README.md").split() == ["old", "work", "more"]
    assert (await pod.messages())[0] == ("user_message_chunk", "before the upgrade")


async def _turns_ended(pod: Pod, count: int) -> bool:
    return sum(e.kind == "turn_end" for e in (await pod.history()).updates) >= count


async def test_a_session_asking_for_its_own_agentctl_image_is_refused_and_told_why(
    isolation_operator: OperatorProcess, sessions: Sessions
) -> None:
    sessions.create("hostile", {"agentctl": {"image": "registry.example/answers-600MiB:1"}})
    refused = await asyncio.to_thread(
        wait_until,
        "Ready=False InvalidSpec",
        lambda: sessions.has_condition("hostile", "Ready", "False", "InvalidSpec"),
        60,
    )
    print(f"\nrefused: {refused['message']}")
    assert "spec.agentctl.image" in refused["message"]
    assert "registry.example/answers-600MiB:1" in refused["message"]
    assert sessions.get("hostile")["status"]["phase"] == "Failed"
    warnings = await asyncio.to_thread(
        wait_until, "the Warning Event", lambda: sessions.has_events("hostile", "InvalidSpec"), 30
    )
    assert warnings
    with pytest.raises(client.exceptions.ApiException) as missing:
        sessions.pod("hostile")
    assert missing.value.status == 404


async def test_an_agent_that_fills_its_workspace_is_evicted_by_its_own_bound(
    isolation_operator: OperatorProcess, sessions: Sessions, pod_of: Any
) -> None:
    sessions.create("filler", {})
    await sessions.until_ready("filler")
    pod = pod_of("filler")
    pod_name = sessions.pod("filler").metadata.name
    written = pod.agent(f"dd if=/dev/zero of=/workspace/fill bs=1M count={FILL_MIB} 2>&1; true")
    wrote = time.monotonic()
    print(f"\nthe agent's write: {written.strip()}")

    def evicted() -> Any:
        events = sessions.core.list_namespaced_event(
            sessions.namespace, field_selector=f"involvedObject.name={pod_name},reason=Evicted"
        ).items
        return events[0] if events else None

    event = await asyncio.to_thread(wait_until, "the kubelet's eviction", evicted, 120)
    print(f"the kubelet, {time.monotonic() - wrote:.1f}s after the write: {event.message}")
    assert "workspace" in event.message
    assert WORKSPACE_LIMIT in event.message
