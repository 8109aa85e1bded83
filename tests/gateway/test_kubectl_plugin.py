"""`kubectl agentsession` against the real gateway and real session pods: the plugin is the one file copied onto
the PATH as its docs say, run through kubectl as a process, with stdin scripted and its output and exit status read.

Each test authenticates another way the plugin supports: --token, a kubeconfig whose user is a ServiceAccount
(the plugin requests it a token for the gateway's audience), and --service-account (a TokenRequest made with the
caller's kubeconfig). The gateway takes tokens for its own audience only, as the chart's does by default.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from agentsession.kubectl_plugin.names import GATEWAY_AUDIENCE
from tests.gateway.conftest import GatewayProcess, service_account_token
from tests.support.kube import Sessions
from tests.support.plugin import PluginRun, install_plugin, plugin_path, run_plugin
from tests.support.processes import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

SESSION = "chat"
USE = ["get", "update"]  # what the gateway asks of a client that drives a session


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory, kubectl: str) -> str:
    return plugin_path(install_plugin(tmp_path_factory.mktemp("bin")).parent, kubectl)


@pytest.fixture
async def chat(node_operator: OperatorProcess, sessions: Sessions) -> Sessions:
    """A Ready session with no initial prompt, so the test's own prompt is the first turn."""
    sessions.create(SESSION, {"workspace": {"emptyDir": True}})
    await sessions.until_ready(SESSION)
    return sessions


@pytest.fixture
def gateway(start_gateway: Callable[..., GatewayProcess], namespace: str) -> GatewayProcess:
    """A gateway with authentication on: every plugin call shows a token the API server checks."""
    return start_gateway("--namespace", namespace, "--token-audience", GATEWAY_AUDIENCE)


def gateway_token(kube_api: Any, namespace: str, name: str, verbs: list[str] | None) -> str:
    return service_account_token(kube_api, namespace, name, verbs, audiences=[GATEWAY_AUDIENCE])


def may_mint_own_tokens(kube_api: Any, namespace: str, name: str) -> None:
    """Lets the ServiceAccount `name` request tokens for itself (create serviceaccounts/token on its own name)."""
    rbac = client.RbacAuthorizationV1Api(kube_api)
    role = f"{name}-own-tokens"
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["serviceaccounts/token"],
                    "verbs": ["create"],
                    "resourceNames": [name],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    })  # fmt: skip


def token_kubeconfig(admin_kubeconfig: str, token: str, where: Path) -> Path:
    """A kubeconfig for the admin's cluster whose user is known by a bearer token only."""
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    where.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "user", "context": {"cluster": cluster["name"], "user": "user"}}],
        "current-context": "user",
    }))  # fmt: skip
    return where


async def test_prompt_attach_and_history_through_the_gateway(
    chat: Sessions,
    gateway: GatewayProcess,
    namespace: str,
    kube_api: Any,
    kubeconfig: str,
    kubectl: str,
    path: str,
    tmp_path: Path,
) -> None:
    token = gateway_token(kube_api, namespace, "user", USE)
    reach = ("-n", namespace, "--gateway", gateway.http_url, "--token", token)

    code, run = await run_plugin(kubectl, path, "prompt", SESSION, "hello from the plugin", *reach)
    assert code == 0, run
    assert "you: hello from the plugin" in run.stdout, run
    assert "agent: You said: hello from the plugin" in run.stdout, run
    assert run.stdout.rstrip().endswith("[turn ended: end_turn]"), run

    # Ctrl-C cancels the running turn, and the exit status says it was cancelled.
    slow = await PluginRun.start(kubectl, path, "prompt", SESSION, "__slow__ " + "word " * 200, *reach)
    await slow.expect("agent: ")
    slow.interrupt()
    assert await slow.exit_code() == 6, slow
    assert "[turn ended: cancelled]" in slow.stdout, slow

    # attach, by the kubeconfig's user, a ServiceAccount: the plugin requests it a token for the gateway alone,
    # and never shows the gateway the kubeconfig's own token.
    may_mint_own_tokens(kube_api, namespace, "user")
    api_token = str(client.CoreV1Api(kube_api).create_namespaced_service_account_token(
        "user", namespace, {"spec": {"expirationSeconds": 3600}}).status.token)  # fmt: skip
    user = token_kubeconfig(kubeconfig, api_token, tmp_path / "kubeconfig")
    attach = await PluginRun.start(
        kubectl,
        path,
        "attach",
        SESSION,
        "-n",
        namespace,
        "--gateway",
        gateway.ws_url,
        "--kubeconfig",
        str(user),
    )
    await attach.expect(f"[attached to {namespace}/{SESSION}: ready;")
    assert "you: hello from the plugin" in attach.stdout, "attach shows the history first"
    await attach.write("please write the file (this asks for permission)\n")
    await attach.expect("permission requested: Write demo.txt: [1] Allow (allow) ")
    await attach.expect("answer: a number, an option id, or an empty line to cancel")
    await attach.write("nonsense\n")
    await attach.expect("answer with 1-2, an option id, or an empty line to cancel")
    await attach.write("1\n")
    await attach.expect("permission: selected allow (responded)")
    await attach.expect("[turn ended: end_turn]")
    await attach.close_stdin()
    assert await attach.exit_code() == 0, attach
    assert "agent: Permission outcome: selected allow." in attach.stdout, attach

    code, history = await run_plugin(kubectl, path, "history", SESSION, *reach)
    assert code == 0, history
    ends = [line for line in history.stdout.splitlines() if line.startswith("[turn ended")]
    assert ends == ["[turn ended: end_turn]", "[turn ended: cancelled]", "[turn ended: end_turn]"], history
    assert history.stdout.index("you: hello from the plugin") < history.stdout.index(
        "permission: selected allow"
    )

    # A token without `update` may read but not drive the session: the gateway's refusal is the message.
    reader = gateway_token(kube_api, namespace, "reader", ["get"])
    code, refused = await run_plugin(kubectl, path, "prompt", SESSION, "hi", "-n", namespace,
                                     "--gateway", gateway.ws_url, "--token", reader)  # fmt: skip
    assert code == 1, refused
    assert "'update' is needed" in refused.stderr, refused


async def test_shell_then_suspend_and_resume_with_the_users_kubeconfig(
    chat: Sessions,
    gateway: GatewayProcess,
    namespace: str,
    kube_api: Any,
    kubeconfig: str,
    kubectl: str,
    path: str,
    tmp_path: Path,
) -> None:
    service_account_token(kube_api, namespace, "user", USE)
    # --service-account: the plugin asks the API server for the account's token with the caller's kubeconfig.
    code, run = await run_plugin(
        kubectl, path, "shell", SESSION, "-n", namespace, "--gateway", gateway.ws_url, "--service-account", "user",
        stdin="cd /workspace && echo marker-$((6 * 7)) && pwd\nexit\n",
    )  # fmt: skip
    assert code == 0, run
    assert "marker-42" in run.stdout, run
    assert "\n/workspace" in run.stdout.replace("\r", ""), run

    viewer = token_kubeconfig(kubeconfig, service_account_token(kube_api, namespace, "viewer", ["get"]),
                              tmp_path / "viewer")  # fmt: skip
    code, refused = await run_plugin(
        kubectl, path, "suspend", SESSION, "-n", namespace, "--kubeconfig", str(viewer)
    )
    assert code == 1, refused
    assert "cannot patch agentsessions.agentsession.dev/chat" in refused.stderr, refused
    assert "403" in refused.stderr, refused
    assert not chat.get(SESSION)["spec"].get("suspend")

    editor = token_kubeconfig(kubeconfig, service_account_token(kube_api, namespace, "editor", ["get", "patch"]),
                              tmp_path / "editor")  # fmt: skip
    reach = ("-n", namespace, "--kubeconfig", str(editor))
    code, run = await run_plugin(kubectl, path, "suspend", SESSION, "--wait", *reach)
    assert code == 0, run
    assert chat.get(SESSION)["status"]["phase"] == "Suspended"
    assert chat.has_condition(SESSION, "Suspended", "True")

    code, run = await run_plugin(kubectl, path, "resume", SESSION, "--wait", *reach)
    assert code == 0, run
    assert chat.get(SESSION)["spec"]["suspend"] is False
    assert chat.has_condition(SESSION, "Ready", "True")
