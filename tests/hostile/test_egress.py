"""A hostile agent against the keys, the egress and the budget, on a node, through the chart as users install it.

The release runs the operator, the gateway and the egress proxy in pods, with NetworkPolicy enforced by the
cluster. The outside world is stood in for by a pod of a namespace of its own: the model vendor, an allowed host,
a refused one and a git host, all one TLS server named through the proxy's resolver override, with a certificate
of a CA only the proxy trusts. From inside the agent containers, as the agent would, each test tries what an
injected instruction would: find the real key, reach the API server, the kubelet, another session's agentctl and
pod, the vendor without the proxy, a host that is not allowed, the proxy's metrics; use another session's phantom.
Each is refused, the key appears nowhere the agent can read, an allowed host works, a real Claude Code turn runs
through the proxy with its usage in the status, and a budget stops a turn.
"""

from __future__ import annotations

import base64
import json
import shlex
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from agentsession.api.constants import AGENT_CONTAINER
from agentsession.api.egress import PHANTOM_DIGEST_ANNOTATION, PHANTOM_PREFIX, phantom_digest
from agentsession.contract.wire import AGENTCTL_PORT
from tests.chart.conftest import CHART, run_helm
from tests.conftest import _unavailable, image_present, installed_tool, wait_until
from tests.integration.conftest import fresh_namespace
from tests.support.chart import Cluster
from tests.support.kube import Sessions
from tests.support.tls import Authority

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

VENDOR_PORT = 8443
PROXY_PORT = 8080
PROXY_METRICS_PORT = 8093
CLAUDE_IMAGE = "agentsession-claude-code:dev"
# Names the world answers to, through the proxy's resolver override only: nothing here resolves them.
VENDOR_HOST = "api.anthropic.com"
ALLOWED_HOST = "allowed.example"
DENIED_HOST = "denied.example"
GIT_HOST = "git.example"
GIT_PORT = 9443
GIT_REF = "0123456789abcdef0123456789abcdef01234567"
# A git host over TLS that serves one ref in git's dumb HTTP protocol (enough for `git ls-remote`) and tells, at
# /seen, the Authorization headers it received.
GIT_HOST_SCRIPT = f"""
import http.server, json, ssl
seen = []
class Git(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/seen":
            body = json.dumps(seen).encode()
        else:
            seen.append({{"path": self.path, "authorization": self.headers.get("Authorization", "")}})
            body = b"{GIT_REF}\\trefs/heads/main\\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.ThreadingHTTPServer(("0.0.0.0", {GIT_PORT}), Git)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/etc/tls/tls.crt", "/etc/tls/tls.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""
REAL_KEY = f"sk-ant-real-{uuid.uuid4().hex}"
REAL_GIT_TOKEN = f"ghp-real-{uuid.uuid4().hex}"
KUBERNETES_SERVICE = ("198.18.16.1", 443)
NODE = "198.18.0.1"
READY_WITHIN = 240.0

RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "readOnlyRootFilesystem": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class World:
    namespace: str
    vendor_ip: str
    git_ip: str
    ca: Path


@dataclass
class Release:
    name: str
    namespace: str
    tenants: tuple[str, str]
    cluster: Cluster

    def k(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.cluster.run(*args, check=check)

    def exec(self, namespace: str, pod: str, script: str, container: str = AGENT_CONTAINER) -> str:
        done = self.k("-n", namespace, "exec", pod, "-c", container, "--", "sh", "-c", script, check=False)
        assert done.returncode == 0, f"exec in {namespace}/{pod} failed: {done.stderr[-2000:]}"
        return done.stdout + done.stderr

    def diagnostics(self) -> str:
        out = [self.k("get", "pods,ags,events,networkpolicy", "-n", ns, "-o", "wide", check=False).stdout
               for ns in (self.namespace, *self.tenants)]  # fmt: skip
        for component in ("operator", "egress-proxy"):
            out.append(self.k("logs", "-n", self.namespace, "-l", f"app.kubernetes.io/component={component}",
                              "--tail=60", check=False).stdout)  # fmt: skip
        return "\n".join(out)


def _pod(name: str, image: str, command: list[str], port: int, secret: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
        "securityContext": RESTRICTED_CONTAINER,
    }
    spec: dict[str, Any] = {"automountServiceAccountToken": False, "containers": [container]}
    if secret:
        container["volumeMounts"] = [{"name": "tls", "mountPath": "/etc/tls", "readOnly": True}]
        spec["volumes"] = [{"name": "tls", "secret": {"secretName": secret}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": spec,
    }


def _ready_ip(core: Any, namespace: str, name: str) -> str:
    def ready() -> str | None:
        status = core.read_namespaced_pod(name, namespace).status
        up = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
        return str(status.pod_ip) if up else None

    return wait_until(f"pod {namespace}/{name} Ready", ready, timeout=120)


namespace_of = contextmanager(fresh_namespace)


@pytest.fixture(scope="module")
def helm() -> str:
    return installed_tool("helm")


@pytest.fixture(scope="module")
def world(kube_api: Any, project_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The outside world: the model stub over TLS, answering as the vendor, the allowed, the refused and the git
    host at once."""
    core: Any = client.CoreV1Api(kube_api)
    authority = Authority(tmp_path_factory.mktemp("ca"))
    leaf = authority.issue("world", VENDOR_HOST, ALLOWED_HOST, DENIED_HOST, GIT_HOST)
    with namespace_of(kube_api, "egress-world") as namespace:
        core.create_namespaced_secret(namespace, {
            "metadata": {"name": "world-tls"}, "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": leaf.cert.read_text(), "tls.key": leaf.key.read_text()},
        })  # fmt: skip
        command = ["agentsession-model-stub", "--host", "0.0.0.0", "--port", str(VENDOR_PORT),
                   "--tls-cert", "/etc/tls/tls.crt", "--tls-key", "/etc/tls/tls.key"]  # fmt: skip
        core.create_namespaced_pod(
            namespace, _pod("vendor", project_image, command, VENDOR_PORT, "world-tls")
        )
        git = ["python3", "-c", GIT_HOST_SCRIPT]
        core.create_namespaced_pod(namespace, _pod("githost", project_image, git, GIT_PORT, "world-tls"))
        vendor_ip = _ready_ip(core, namespace, "vendor")
        yield World(namespace, vendor_ip, _ready_ip(core, namespace, "githost"), authority.cert)


@pytest.fixture(scope="module")
def release(
    kube_api: Any, helm: str, kubectl: str, kubeconfig: str, project_image: str, world: World,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Release]:  # fmt: skip
    """The chart, serving two tenant namespaces, its proxy pointed at the world and trusting the world's CA."""
    core: Any = client.CoreV1Api(kube_api)
    stack = ExitStack()
    namespace, a, b = (
        stack.enter_context(namespace_of(kube_api, f"egress-{part}")) for part in ("rel", "a", "b")
    )
    rel = Release(f"eg-{uuid.uuid4().hex[:6]}", namespace, (a, b), Cluster(kubectl, kubeconfig))
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "world-ca"},
                                                  "data": {"ca.crt": world.ca.read_text()}})  # fmt: skip
    for tenant in (a, b):
        core.create_namespaced_secret(tenant, {
            "metadata": {"name": "model-key"},
            "stringData": {"ANTHROPIC_API_KEY": REAL_KEY, "GIT_TOKEN": REAL_GIT_TOKEN},
        })  # fmt: skip
    at = f"{world.vendor_ip}:{VENDOR_PORT}"
    repository, _, tag = project_image.rpartition(":")
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
        "watchNamespaces": [a, b],
        "egressProxy": {
            "replicas": 1,
            "resolve": {
                VENDOR_HOST: at,
                ALLOWED_HOST: at,
                DENIED_HOST: at,
                GIT_HOST: f"{world.git_ip}:{GIT_PORT}",
            },
            "upstreamCA": {"configMapName": "world-ca", "key": "ca.crt"},
            "defaultAllow": [ALLOWED_HOST],
            "git": {"hosts": [GIT_HOST]},
        },
    }
    values_file = tmp_path_factory.mktemp("values") / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    crd_present = rel.k("get", "crd", "agentsessions.agentsession.dev", check=False).returncode == 0
    install = run_helm(
        helm, "install", rel.name, str(CHART), "--kubeconfig", kubeconfig, "--namespace", namespace,
        "-f", str(CHART / "ci" / "dev-values.yaml"), "-f", str(values_file),
        *(["--skip-crds"] if crd_present else []), "--wait", "--timeout", "180s", check=False, timeout=240,
    )  # fmt: skip
    try:
        if install.returncode != 0:
            pytest.fail(f"helm install failed:\n{install.stderr}\n{rel.diagnostics()}", pytrace=False)
        yield rel
    finally:
        for tenant in (a, b):
            rel.k("delete", "ags", "--all", "-n", tenant, "--wait=true", "--timeout=90s", check=False)
        run_helm(helm, "uninstall", rel.name, "--kubeconfig", kubeconfig, "--namespace", namespace, "--wait",
                 "--timeout", "120s", check=False, timeout=180)  # fmt: skip
        stack.close()


@pytest.fixture(scope="module")
def claude_image(kube_api: Any, kubeconfig: str) -> str:
    if not image_present(kube_api, kubeconfig, CLAUDE_IMAGE):
        _unavailable(
            f"image {CLAUDE_IMAGE} is not on the node: build and import it with `make agent-images`",
            require_env=("AGENTSESSION_REQUIRE_AGENTS",),
        )
    return CLAUDE_IMAGE


def _session(release: Release, kube_api: Any, tenant: int, name: str, spec: dict[str, Any]) -> Sessions:
    sessions = Sessions(kube_api, release.tenants[tenant])
    sessions.create(name, spec)
    return sessions


def _ready(release: Release, sessions: Sessions, name: str) -> Any:
    try:
        wait_until(
            f"{name} Ready", lambda: sessions.has_condition(name, "Ready", "True"), timeout=READY_WITHIN
        )
    except pytest.fail.Exception:
        pytest.fail(f"session {name} never became Ready\n{release.diagnostics()}", pytrace=False)
    return sessions.pod(name)


CLAUDE_SPEC = {"agent": {"type": "claude-code", "credentialsSecretRef": {"name": "model-key"}}}
DEMO_SPEC = {"agent": {"type": "demo", "credentialsSecretRef": {"name": "model-key"}}}


@pytest.fixture(scope="module")
def pods(release: Release, kube_api: Any, claude_image: str) -> dict[str, Any]:
    """The sessions the attacks start from and aim at: in tenant A a Claude Code session (it holds a phantom)
    and a hostile one (the demo agent's image has python3 to attack with); in tenant B another."""
    claude = _session(release, kube_api, 0, "claude", {**CLAUDE_SPEC, "prompt": "say something"})
    hostile = _session(release, kube_api, 0, "hostile", DEMO_SPEC)
    other = _session(release, kube_api, 1, "other", DEMO_SPEC)
    return {
        "claude": (claude, _ready(release, claude, "claude")),
        "hostile": (hostile, _ready(release, hostile, "hostile")),
        "other": (other, _ready(release, other, "other")),
    }


def _proxy(release: Release) -> tuple[str, str]:
    """The proxy Service's ClusterIP and one proxy pod's IP."""
    service = json.loads(
        release.k(
            "get",
            "svc",
            "-n",
            release.namespace,
            "-l",
            "app.kubernetes.io/component=egress-proxy",
            "-o",
            "json",
        ).stdout
    )["items"][0]
    pod = json.loads(release.k("get", "pods", "-n", release.namespace, "-l",
                               "app.kubernetes.io/component=egress-proxy", "-o", "json").stdout)["items"][0]  # fmt: skip
    return service["spec"]["clusterIP"], pod["status"]["podIP"]


def _phantom(pod: Any) -> str:
    agent = next(c for c in pod.spec.containers if c.name == AGENT_CONTAINER)
    value = next(e.value for e in agent.env or [] if e.name == "ANTHROPIC_API_KEY")
    assert value.startswith(PHANTOM_PREFIX)
    assert pod.metadata.annotations[PHANTOM_DIGEST_ANNOTATION] == phantom_digest(value)
    return str(value)


# Run in the hostile agent's container: each probe's outcome, as JSON. A connection that the policy drops times
# out; one it refuses fails at once; either way no byte is exchanged.
PROBE = r"""
import json, socket, ssl, sys, urllib.request, urllib.error
plan = json.loads(sys.argv[1])
out = {}
for name, (host, port) in plan["tcp"].items():
    try:
        socket.create_connection((host, port), timeout=3).close()
        out[name] = "connected"
    except OSError as error:
        out[name] = f"refused: {error}"
def connect(target):
    s = socket.create_connection((plan["proxy"], plan["proxy_port"]), timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk: break
        head += chunk
    return s, head.decode(errors="replace")
for name, target in plan["connect"].items():
    s, head = connect(target)
    body = ""
    if head.startswith("HTTP/1.1 200"):
        tls = ssl.create_default_context(); tls.check_hostname = False; tls.verify_mode = ssl.CERT_NONE
        t = tls.wrap_socket(s, server_hostname=target.split(":")[0])
        t.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        body = t.recv(4096).decode(errors="replace")
    else:
        body = head.split("\r\n\r\n", 1)[1]
        s.settimeout(2)
        try:
            body += s.recv(65536).decode(errors="replace")
        except OSError:
            pass
    out[name] = {"head": head.split("\r\n")[0], "body": body[:2000]}
for name, (path, key) in plan["model"].items():
    request = urllib.request.Request(f"http://{plan['proxy']}:{plan['proxy_port']}{path}", method="POST",
        data=b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}',
        headers={"x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            out[name] = {"status": answer.status, "body": answer.read(4000).decode(errors="replace")}
    except urllib.error.HTTPError as error:
        out[name] = {"status": error.code, "body": error.read(4000).decode(errors="replace")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probed(release: Release, pods: dict[str, Any], world: World) -> dict[str, Any]:
    hostile_sessions, hostile = pods["hostile"]
    _, claude = pods["claude"]
    _, other = pods["other"]
    service_ip, proxy_pod_ip = _proxy(release)
    plan = {
        "proxy": service_ip,
        "proxy_port": PROXY_PORT,
        "tcp": {
            "api server service": KUBERNETES_SERVICE,
            "api server on the node": (NODE, 6443),
            "kubelet": (NODE, 10250),
            "agentctl of another tenant's session": (other.status.pod_ip, AGENTCTL_PORT),
            "agentctl of a session of the same tenant": (claude.status.pod_ip, AGENTCTL_PORT),
            "another session's pod": (other.status.pod_ip, 8080),
            "the vendor without the proxy": (world.vendor_ip, VENDOR_PORT),
            "the proxy's metrics": (proxy_pod_ip, PROXY_METRICS_PORT),
            "the proxy": (service_ip, PROXY_PORT),
        },
        "connect": {
            "allowed": f"{ALLOWED_HOST}:443",
            "denied": f"{DENIED_HOST}:443",
            "vendor by connect": f"{VENDOR_HOST}:443",
        },
        "model": {
            "another session's phantom": ("/v1/model/anthropic/v1/messages", _phantom(claude)),
            "a made-up phantom": ("/v1/model/anthropic/v1/messages", PHANTOM_PREFIX + "x" * 43),
        },
    }
    script = f"python3 -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(plan))}"
    output = release.exec(hostile_sessions.namespace, hostile.metadata.name, script)
    return dict(json.loads(output.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "target",
    [
        "api server service",
        "api server on the node",
        "kubelet",
        "agentctl of another tenant's session",
        "agentctl of a session of the same tenant",
        "another session's pod",
        "the vendor without the proxy",
        "the proxy's metrics",
    ],
)
def test_the_agent_reaches_nothing_but_the_proxy(probed: dict[str, Any], target: str) -> None:
    assert probed[target].startswith("refused"), (target, probed[target])


def test_the_proxy_is_reachable(probed: dict[str, Any]) -> None:
    assert probed["the proxy"] == "connected", probed


def test_an_allowed_host_works_and_others_are_refused_with_the_reason(probed: dict[str, Any]) -> None:
    allowed, denied = probed["allowed"], probed["denied"]
    assert allowed["head"].startswith("HTTP/1.1 200"), allowed
    assert " 200 " in allowed["body"].split("\r\n")[0], allowed
    assert denied["head"].startswith("HTTP/1.1 403"), denied
    assert DENIED_HOST in denied["body"], denied
    assert "spec.network.egress.allow" in denied["body"], denied
    # The vendor's host is the model route's upstream, not a host the agent may tunnel to with its own key.
    assert probed["vendor by connect"]["head"].startswith("HTTP/1.1 403"), probed


def test_a_refused_host_is_a_warning_event_on_the_session(
    release: Release, pods: dict[str, Any], probed: dict[str, Any]
) -> None:
    sessions, _ = pods["hostile"]
    event = wait_until(
        "an EgressDenied event",
        lambda: next((e for e in sessions.events("hostile") if e.reason == "EgressDenied"), None),
        timeout=30,
    )
    assert event.type == "Warning", event
    assert DENIED_HOST in event.message, event


def test_another_sessions_phantom_is_refused(probed: dict[str, Any]) -> None:
    used = probed["another session's phantom"]
    assert used["status"] == 403, used
    assert "credential_not_bound" in used["body"], used
    made_up = probed["a made-up phantom"]
    assert made_up["status"] == 401, made_up
    assert "unknown_credential" in made_up["body"], made_up
    assert all(REAL_KEY not in json.dumps(v) for v in probed.values())


# Everywhere a process of the agent container can look for the key: its environment and every process's it can
# read, its files, its service account token (there is none), and the Secret through the API server.
HUNT = f"""
echo "== env"; env
echo "== proc"; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < "$f" 2>/dev/null; done
echo "== files"; grep -rIl -e {REAL_KEY} -e {REAL_GIT_TOKEN} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null
echo "== token"; cat /var/run/secrets/kubernetes.io/serviceaccount/token 2>&1
echo "== git"; git config --show-origin --list 2>&1
echo "== end"
"""


def test_the_key_is_nowhere_the_agent_can_read(release: Release, pods: dict[str, Any]) -> None:
    sessions, pod = pods["claude"]
    found = release.exec(sessions.namespace, pod.metadata.name, HUNT)
    assert "== end" in found, found
    assert REAL_KEY not in found, found
    assert REAL_GIT_TOKEN not in found, found
    assert f"ANTHROPIC_API_KEY={PHANTOM_PREFIX}" in found, found
    assert "No such file" in found.split("== token")[1], found
    # No container of the pod refers to the credentials Secret at all.
    spec = release.k(
        "get", "pod", pod.metadata.name, "-n", sessions.namespace, "-o", "jsonpath={.spec}"
    ).stdout
    assert "model-key" not in spec, spec


def test_a_real_claude_turn_runs_through_the_proxy_and_its_usage_is_metered(
    release: Release, pods: dict[str, Any], world: World
) -> None:
    sessions, _ = pods["claude"]

    def metered() -> dict[str, Any] | None:
        usage = (sessions.get("claude").get("status") or {}).get("usage") or {}
        return usage if usage.get("requests", 0) >= 1 and usage.get("outputTokens", 0) > 0 else None

    usage = wait_until("claude's usage in its status", metered, timeout=120)
    assert float(usage["costUSD"]) > 0, usage
    received = _received(world)
    prompts = [r for r in received if r["kind"] == "prompt" and r["text"] == "say something"]
    assert prompts, received
    # The vendor saw the real key, never the phantom.
    assert {r.get("api_key") for r in received} == {REAL_KEY}, received
    table = release.k("get", "ags", "claude", "-n", sessions.namespace, "-o", "wide").stdout
    assert "COST" in table.splitlines()[0], table


def _received(world: World) -> list[dict[str, Any]]:
    import urllib.request

    context = ssl.create_default_context(cafile=str(world.ca))
    context.check_hostname = False
    with urllib.request.urlopen(
        f"https://{world.vendor_ip}:{VENDOR_PORT}/requests", context=context
    ) as answer:
        received: list[dict[str, Any]] = json.loads(answer.read())
    return received


def test_a_budget_stops_a_turn_and_raising_it_lets_the_session_go_on(
    release: Release, kube_api: Any, pods: dict[str, Any], world: World
) -> None:
    spec = {**CLAUDE_SPEC, "budget": {"maxTokens": 1}, "prompt": "slow"}
    sessions = _session(release, kube_api, 0, "budgeted", spec)
    _ready(release, sessions, "budgeted")
    started = time.monotonic()
    exhausted = wait_until(
        "BudgetExhausted=True",
        lambda: sessions.has_condition("budgeted", "BudgetExhausted", "True"),
        timeout=60,
    )
    assert "tokens" in exhausted["message"], exhausted

    def slow_stream_ended() -> list[dict[str, Any]] | None:
        slow = [r for r in _received(world) if r["text"] == "slow" and r["kind"] == "prompt"]
        return slow if slow and all(r["outcome"] != "streaming" for r in slow) else None

    # The stub streams a slow reply for a minute; the turn ends long before, cut by the budget.
    ended = wait_until("the slow turn cut short", slow_stream_ended, timeout=45)
    assert time.monotonic() - started < 45, ended
    assert wait_until("a BudgetExhausted event", lambda: sessions.has_events("budgeted", "BudgetExhausted"))
    sessions.patch_spec("budgeted", {"budget": {"maxTokens": 10_000_000}})
    wait_until(
        "BudgetExhausted=False after the raise",
        lambda: sessions.has_condition("budgeted", "BudgetExhausted", "False"),
        timeout=60,
    )
    sessions.delete("budgeted")


def test_git_gets_the_token_the_agent_never_sees_and_push_is_refused(
    release: Release, pods: dict[str, Any], world: World
) -> None:
    sessions, pod = pods["claude"]
    listed = release.exec(
        sessions.namespace, pod.metadata.name, f"git ls-remote https://{GIT_HOST}/org/repo.git"
    )
    assert f"{GIT_REF}\trefs/heads/main" in listed, listed
    context = ssl.create_default_context(cafile=str(world.ca))
    context.check_hostname = False
    import urllib.request

    with urllib.request.urlopen(f"https://{world.git_ip}:{GIT_PORT}/seen", context=context) as answer:
        seen = json.loads(answer.read())
    expected = "Basic " + base64.b64encode(f"x-access-token:{REAL_GIT_TOKEN}".encode()).decode()
    assert seen, seen
    assert {entry["authorization"] for entry in seen} == {expected}, seen
    push = release.exec(
        sessions.namespace, pod.metadata.name,
        "cd /tmp && rm -rf p && git init -q p && cd p && git -c user.name=a -c user.email=a@b commit -q "
        f"--allow-empty -m x && git push https://{GIT_HOST}/org/repo.git HEAD:main 2>&1; echo exit=$?",
    )  # fmt: skip
    assert "exit=0" not in push, push
    assert "403" in push, push
