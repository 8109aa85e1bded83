"""What an agent finds in its pod, on a real node: its exit message in status, a home that exists, extra CAs.

Each agent here is a small script in a real image, standing in for an agent that fails or checks its
surroundings the way real ones do (Codex exits with one line when CODEX_HOME is missing, for instance).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.conftest import _unavailable, image_present, wait_until
from tests.support.kube import Sessions
from tests.support.processes import OperatorProcess
from tests.support.tls import Authority

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

TLS_NAME = "tls-test.agentsession.test"
TLS_PORT = 8443
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _ready_message_with(sessions: Sessions, name: str, text: str) -> Any:
    ready = sessions.condition(name, "Ready")
    return ready if ready and text in ready["message"] else None


def test_an_agent_that_exits_at_start_up_says_why_in_status_and_an_event(
    node_operator: OperatorProcess, sessions: Sessions, project_image: str
) -> None:
    said = "config error: MODEL_HOME points to /nowhere, which does not exist"
    script = f'echo "starting up" >&2; echo "{said}" >&2; exit 3'
    sessions.create(
        "dies", {"agent": {"type": "custom", "image": project_image, "command": ["sh", "-c", script]}}
    )
    ready = wait_until(
        "the agent's last words in Ready", lambda: _ready_message_with(sessions, "dies", said), timeout=45
    )
    assert ready["status"] == "False"
    assert ready["reason"] in {"AgentExited", "CrashLoopBackOff"}
    assert "exit code 3" in ready["message"]
    warning = wait_until(
        "a Warning event that carries them",
        lambda: [e for e in sessions.events("dies") if e.type == "Warning" and said in e.message] or None,
        timeout=30,
    )
    assert warning[0].reason in {"AgentExited", "CrashLoopBackOff"}


def test_the_agent_home_and_its_profile_state_dirs_exist_before_it_starts(
    node_operator: OperatorProcess, sessions: Sessions, project_image: str
) -> None:
    # The codex profile declares CODEX_HOME under HOME; this agent refuses to start without both, writable.
    script = (
        'test -d "$HOME" && test -w "$CODEX_HOME" || '
        '{ echo "missing: HOME=$HOME CODEX_HOME=$CODEX_HOME" >&2; exit 1; }; '
        'touch "$CODEX_HOME/config.toml" && exec agentsession-demo-agent'
    )
    sessions.create(
        "home", {"agent": {"type": "codex", "image": project_image, "command": ["sh", "-c", script]}}
    )
    ready = wait_until(
        "Ready=True with a home", lambda: sessions.has_condition("home", "Ready", "True"), timeout=120
    )
    assert ready["reason"] == "Ready"


# ---------------------------------------------------------------- extra CAs


@pytest.fixture
def test_ca(tmp_path: Path) -> Path:
    """A CA (ca.crt) and a server certificate for TLS_NAME it signed (tls.crt, tls.key), for this test only."""
    Authority(tmp_path).issue("tls", TLS_NAME)
    return tmp_path


TLS_SERVER = f"""
import http.server, ssl
server = http.server.HTTPServer(("0.0.0.0", {TLS_PORT}), http.server.SimpleHTTPRequestHandler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/tls/tls.crt", "/tls/tls.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


@pytest.fixture
def tls_server(sessions: Sessions, project_image: str, test_ca: Path) -> str:
    """A TLS server pod with the test certificate; yields its IP. The CA goes to ConfigMap `test-ca`."""
    from kubernetes import client

    core, ns = sessions.core, sessions.namespace
    core.create_namespaced_config_map(
        ns,
        client.V1ConfigMap(metadata={"name": "test-ca"}, data={"ca.crt": (test_ca / "ca.crt").read_text()}),
    )
    core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata={"name": "tls-server"},
            type="kubernetes.io/tls",
            string_data={
                "tls.crt": (test_ca / "tls.crt").read_text(),
                "tls.key": (test_ca / "tls.key").read_text(),
            },
        ),
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tls-server"},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "server",
                    "image": project_image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "-c", TLS_SERVER],
                    "workingDir": "/tmp",
                    "securityContext": RESTRICTED,
                    "readinessProbe": {"tcpSocket": {"port": TLS_PORT}, "periodSeconds": 1},
                    "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "tls", "secret": {"secretName": "tls-server"}}],
        },
    }
    core.create_namespaced_pod(ns, pod)

    def ready_ip() -> str | None:
        status = core.read_namespaced_pod("tls-server", ns).status
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
        return status.pod_ip if ready else None

    return str(wait_until("the TLS server pod Ready", ready_ip, timeout=120))


PYTHON_CLIENT = f"""
import socket, ssl, sys
try:
    with socket.create_connection((sys.argv[1], {TLS_PORT}), timeout=10) as raw:
        with ssl.create_default_context().wrap_socket(raw, server_hostname="{TLS_NAME}") as tls:
            tls.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
            print("TLS-OK", tls.recv(64).decode(errors="replace").splitlines()[0], file=sys.stderr)
except Exception as exc:
    print("TLS-FAIL", type(exc).__name__, exc, file=sys.stderr)
sys.exit(3)
"""


def test_an_agent_trusts_the_ca_bundle_named_in_its_spec(
    node_operator: OperatorProcess, sessions: Sessions, project_image: str, tls_server: str
) -> None:
    """Python's TLS (OpenSSL) through SSL_CERT_FILE; the same request without the bundle is refused."""
    agent = {
        "type": "custom",
        "image": project_image,
        "command": ["python3", "-c", PYTHON_CLIENT, tls_server],
    }
    sessions.create("trusts", {"agent": {**agent, "caBundle": {"configMapName": "test-ca"}}})
    sessions.create("distrusts", {"agent": agent})
    trusted = wait_until(
        "the agent's TLS result", lambda: _ready_message_with(sessions, "trusts", "TLS-"), timeout=90
    )
    assert "TLS-OK HTTP/1.0 200 OK" in trusted["message"], trusted["message"]
    refused = wait_until(
        "the control's TLS result", lambda: _ready_message_with(sessions, "distrusts", "TLS-"), timeout=90
    )
    assert "TLS-FAIL SSLCertVerificationError" in refused["message"], refused["message"]


NODE_CLIENT = f"""
const tls = require("tls");
const socket = tls.connect({{host: process.argv[1], port: {TLS_PORT}, servername: "{TLS_NAME}"}}, () => {{
  console.error("TLS-OK authorized=" + socket.authorized); process.exit(3);
}});
socket.on("error", (error) => {{ console.error("TLS-FAIL " + error.code); process.exit(3); }});
"""
GIT_CLIENT = (
    f'git -c http.curloptResolve={TLS_NAME}:{TLS_PORT}:"$0" ls-remote https://{TLS_NAME}:{TLS_PORT}/repo 2>&1 '
    "| tail -n 1 >&2; exit 3"
)


@pytest.mark.parametrize(
    ("image", "command", "trusted_says", "refused_says"),
    [
        pytest.param(
            "agentsession-claude-code:dev", ["node", "-e", NODE_CLIENT], "TLS-OK authorized=true", "TLS-FAIL",
            id="node-NODE_EXTRA_CA_CERTS",
        ),
        pytest.param(
            "agentsession-codex:dev", ["sh", "-c", GIT_CLIENT], "not found", "unable to access",
            id="git-GIT_SSL_CAINFO",
        ),
    ],
)  # fmt: skip
def test_agent_images_trust_the_ca_bundle(
    node_operator: OperatorProcess,
    sessions: Sessions,
    kube_api: Any,
    kubeconfig: str,
    tls_server: str,
    image: str,
    command: list[str],
    trusted_says: str,
    refused_says: str,
) -> None:
    """The agent images' own runtimes: Node through NODE_EXTRA_CA_CERTS, git (GnuTLS) through GIT_SSL_CAINFO."""
    if not image_present(kube_api, kubeconfig, image):
        _unavailable(
            f"image {image} is not on the node: run `make agent-images`",
            require_env=("AGENTSESSION_REQUIRE_AGENTS",),
        )
    agent = {"type": "custom", "image": image, "command": [*command, tls_server]}
    sessions.create("trusts", {"agent": {**agent, "caBundle": {"configMapName": "test-ca"}}})
    sessions.create("distrusts", {"agent": agent})
    trusted = wait_until(
        "the agent's TLS result", lambda: _ready_message_with(sessions, "trusts", "exit code 3"), timeout=90
    )
    assert trusted_says in trusted["message"], trusted["message"]
    refused = wait_until(
        "the control's TLS result",
        lambda: _ready_message_with(sessions, "distrusts", "exit code 3"),
        timeout=90,
    )
    assert refused_says in refused["message"], refused["message"]
