from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes.utils.quantity import parse_quantity

from agentsession.api.models import AgentSessionSpec, CABundleSource
from agentsession.api.session_ref import SessionRef
from agentsession.controller.config import AgentProfile, OperatorConfig
from agentsession.controller.pod_builder import (
    SPEC_HASH_ANNOTATION,
    SpecError,
    build_pod,
    build_token_secret,
    build_workspace_claim,
)
from tests.support.pod_security import restricted_violations, secret_references

SESSION = SessionRef(namespace="team-a", name="fix-bug", uid="1234-uid", generation=3)
CONFIG = OperatorConfig(image="agentsession:test")


def pod_for(spec: dict[str, Any], config: OperatorConfig = CONFIG) -> dict[str, Any]:
    return build_pod(SESSION, AgentSessionSpec.model_validate(spec), config)


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    everything = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
    return next(c for c in everything if c["name"] == name)


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"workspace": {"size": "1Gi"}, "lifecycle": {"maxDuration": "1h", "drainTimeout": "90s"}},
        {"workspace": {"size": "1Gi", "repository": {"url": "https://example.com/r.git", "ref": "main"}}},
        {"agent": {"type": "custom", "image": "example/agent:1", "command": ["agent", "--acp"]}},
    ],
)
def test_pod_meets_the_restricted_pod_security_standard(spec: dict[str, Any]) -> None:
    assert restricted_violations(pod_for(spec)) == []


def test_the_checker_catches_a_violation() -> None:
    pod = pod_for({})
    container(pod, "agent")["securityContext"]["allowPrivilegeEscalation"] = True
    pod["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    assert restricted_violations(pod) == [
        "volume host uses a forbidden type ['hostPath']",
        "agent: allowPrivilegeEscalation must be false",
    ]


def test_agentctl_is_a_native_sidecar_with_probes_on_health() -> None:
    agentctl = container(pod_for({}), "agentctl")
    assert agentctl["restartPolicy"] == "Always"
    assert agentctl["image"] == "agentsession:test"
    for probe in ("readinessProbe", "livenessProbe"):
        assert agentctl[probe]["httpGet"] == {"path": "/health", "port": "agentctl"}
    # Readiness from the first second: no startup probe holds the agent container back.
    assert "startupProbe" not in agentctl
    assert agentctl["readinessProbe"]["periodSeconds"] == 1
    assert agentctl["ports"] == [{"name": "agentctl", "containerPort": 9999, "protocol": "TCP"}]
    token = next(e for e in agentctl["env"] if e["name"] == "AGENTCTL_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "fix-bug-agentctl-token", "key": "token"}
    assert agentctl["args"][agentctl["args"].index("--agent-fifo-dir") + 1] == "/run/agentctl"


def test_the_agent_is_ready_when_agentctl_says_it_answered_acp_initialize() -> None:
    probe = container(pod_for({}), "agent")["readinessProbe"]
    # The agent container declares no port: agentctl's is named by number. agentctl holds the probe for up to a
    # second, within the probe's timeout, so the probe sees the answer when it comes.
    assert probe["httpGet"] == {"path": "/health/agent?wait=1", "port": 9999}
    assert probe["timeoutSeconds"] > 1
    assert probe["periodSeconds"] == 1


def test_agent_stdio_is_joined_to_agentctl_through_the_fifo_pair() -> None:
    agent = container(
        pod_for({"agent": {"type": "custom", "image": "x/y:1", "command": ["run", "it"]}}), "agent"
    )
    assert agent["command"][:2] == ["sh", "-c"]
    assert agent["command"][3:] == ["agent", "run", "it"]
    assert '"$@" <"/run/agentctl/agent.in" >"/run/agentctl/agent.out" &' in agent["command"][2]
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert mounts == {"workspace": "/workspace", "agentctl-fifo": "/run/agentctl", "tmp": "/tmp"}


def test_demo_agent_runs_from_the_operator_image_by_default() -> None:
    agent = container(pod_for({}), "agent")
    assert agent["image"] == "agentsession:test"
    assert agent["command"][-1] == "agentsession-demo-agent"


def test_known_agent_without_an_image_is_a_spec_error_that_says_what_to_set() -> None:
    config = CONFIG.model_copy(update={"agent_profiles": {"codex": AgentProfile(command=["codex-acp"])}})
    with pytest.raises(SpecError, match=r"set spec.agent.image"):
        pod_for({"agent": {"type": "codex"}}, config)


@pytest.mark.parametrize(
    ("kind", "image", "command"),
    [
        ("claude-code", "agentsession-claude-code:dev", ["claude-agent-acp"]),
        ("codex", "agentsession-codex:dev", ["codex-acp"]),
        ("gemini", "agentsession-gemini:dev", ["gemini", "--experimental-acp"]),
    ],
)
def test_known_agents_run_the_project_images_by_default(kind: str, image: str, command: list[str]) -> None:
    agent = container(pod_for({"agent": {"type": kind}}), "agent")
    assert agent["image"] == image
    assert agent["command"][4 : 4 + len(command)] == command


def test_profile_image_and_args_apply_to_known_agents() -> None:
    config = CONFIG.model_copy(
        update={
            "agent_profiles": {"codex": AgentProfile(image="codex:1", command=["codex-acp"], args=["-v"])}
        }
    )
    agent = container(pod_for({"agent": {"type": "codex"}}, config), "agent")
    assert agent["image"] == "codex:1"
    assert agent["command"][-2:] == ["codex-acp", "-v"]


def test_credentials_and_env_reach_the_agent_only() -> None:
    pod = pod_for(
        {
            "agent": {
                "credentialsSecretRef": {"name": "anthropic"},
                "env": [{"name": "HOME", "value": "/home/agent"}, {"name": "DEBUG", "value": "1"}],
            }
        }
    )
    agent = container(pod, "agent")
    assert agent["envFrom"] == [{"secretRef": {"name": "anthropic"}}]
    assert {e["name"]: e["value"] for e in agent["env"]} == {"HOME": "/home/agent", "DEBUG": "1"}
    assert "envFrom" not in container(pod, "agentctl")


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"agent": {"credentialsSecretRef": {"name": "keys"}, "envFrom": [{"secretRef": {"name": "more"}}]}},
        {"agent": {"type": "codex", "caBundle": {"configMapName": "ca"}}},
        {"workspace": {"size": "1Gi", "repository": {"url": "https://example.com/r.git"}}},
    ],
)
def test_only_agentctl_gets_its_token_and_no_container_a_service_account_token(spec: dict[str, Any]) -> None:
    profile = AgentProfile(image="codex:1", command=["codex-acp"], state_dirs=["CODEX_HOME"])
    pod = pod_for(
        spec, CONFIG.model_copy(update={"agent_profiles": {**CONFIG.agent_profiles, "codex": profile}})
    )
    agentctl = next(i for i, c in enumerate(pod["spec"]["initContainers"]) if c["name"] == "agentctl")
    assert secret_references(pod, "fix-bug-agentctl-token") == [
        f".spec.initContainers[{agentctl}].env[0].valueFrom.secretKeyRef"
    ]
    assert [e["name"] for e in container(pod, "agent")["env"] if e["name"].startswith("AGENTCTL")] == []
    # Nor can the agent see agentctl's processes, whose environment holds the token.
    assert "shareProcessNamespace" not in pod["spec"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert not [v for v in pod["spec"]["volumes"] if "projected" in v or "secret" in v]


def test_children_are_owned_and_labelled() -> None:
    pod = pod_for({"podTemplate": {"labels": {"team": "a", "agentsession.dev/name": "spoofed"}}})
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner["uid"] == "1234-uid"
    assert owner["controller"] is True
    assert pod["metadata"]["labels"]["agentsession.dev/name"] == "fix-bug"
    assert pod["metadata"]["labels"]["team"] == "a"
    assert pod["metadata"]["name"] == "fix-bug-agent"
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_persistent_workspace_uses_a_claim_and_emptydir_does_not() -> None:
    spec = AgentSessionSpec.model_validate({"workspace": {"size": "2Gi", "storageClassName": "fast"}})
    claim = build_workspace_claim(SESSION, spec)
    assert claim is not None
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "1234-uid"
    volumes = {v["name"]: v for v in build_pod(SESSION, spec, CONFIG)["spec"]["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"] == {"claimName": "fix-bug-workspace"}
    assert build_workspace_claim(SESSION, AgentSessionSpec()) is None
    assert "emptyDir" in {v["name"]: v for v in pod_for({})["spec"]["volumes"]}["workspace"]


def test_lifecycle_durations_map_to_pod_deadlines() -> None:
    pod = pod_for({"lifecycle": {"maxDuration": "1h30m", "drainTimeout": "2m", "restartPolicy": "Never"}})
    assert pod["spec"]["activeDeadlineSeconds"] == 5400
    # The drain timeout, then the cancel grace and the exits.
    assert pod["spec"]["terminationGracePeriodSeconds"] == 130
    assert "--drain-timeout" in container(pod, "agentctl")["args"]
    args = container(pod, "agentctl")["args"]
    assert args[args.index("--drain-timeout") + 1] == "120"
    assert pod_for({})["spec"]["terminationGracePeriodSeconds"] == 30
    assert pod["spec"]["restartPolicy"] == "Never"


def test_token_secret_holds_the_token() -> None:
    secret = build_token_secret(SESSION, "s3cret")
    assert base64.b64decode(secret["data"]["token"]) == b"s3cret"
    assert secret["metadata"]["name"] == "fix-bug-agentctl-token"


def test_spec_hash_changes_with_the_pod_and_not_with_prompt_or_title() -> None:
    def digest(spec: dict[str, Any]) -> str:
        return str(pod_for(spec)["metadata"]["annotations"][SPEC_HASH_ANNOTATION])

    assert digest({}) == digest({"prompt": "hello", "title": "t", "mode": "code"})
    assert digest({}) != digest({"agent": {"env": [{"name": "A", "value": "1"}]}})


def test_both_containers_report_their_last_output_when_they_fail() -> None:
    pod = pod_for({"workspace": {"size": "1Gi", "repository": {"url": "https://example.com/r.git"}}})
    for name in ("agent", "agentctl", "clone"):
        assert container(pod, name)["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_profile_env_and_state_dirs_prepare_the_agent_home() -> None:
    config = CONFIG.model_copy(
        update={
            "agent_profiles": {
                "codex": AgentProfile.model_validate(
                    {
                        "image": "codex:1",
                        "command": ["codex-acp"],
                        "env": {"CODEX_HOME": "$(HOME)/.codex", "RUST_LOG": "warn"},
                        "stateDirs": ["CODEX_HOME"],
                    }
                )
            }
        }
    )
    agent = container(
        pod_for({"agent": {"type": "codex", "env": [{"name": "RUST_LOG", "value": "debug"}]}}, config),
        "agent",
    )
    # HOME comes first so the profile's $(HOME) references expand; the session's env wins in place.
    assert agent["env"] == [
        {"name": "HOME", "value": "/workspace/.home"},
        {"name": "CODEX_HOME", "value": "$(HOME)/.codex"},
        {"name": "RUST_LOG", "value": "debug"},
    ]
    assert 'for d in "$HOME" "$CODEX_HOME"; do' in agent["command"][2]
    assert agent["command"][2].index("mkdir -p") < agent["command"][2].index('"$@" <')


def test_a_ca_bundle_is_mounted_and_named_to_every_runtime() -> None:
    pod = pod_for({"agent": {"caBundle": {"configMapName": "corp-ca", "key": "root.pem"}}})
    agent = container(pod, "agent")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["ca-bundle"]["configMap"] == {
        "name": "corp-ca",
        "items": [{"key": "root.pem", "path": "ca.crt"}],
    }
    assert {"name": "ca-bundle", "mountPath": "/etc/agentsession/ca", "readOnly": True} in agent[
        "volumeMounts"
    ]
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/agentsession/ca/ca.crt"
    assert env["SSL_CERT_FILE"] == env["REQUESTS_CA_BUNDLE"] == "/tmp/.agentsession/ca-bundle.crt"
    assert env["GIT_SSL_CAINFO"] == "/tmp/.agentsession/ca-bundle.crt"
    assert 'cat "/etc/agentsession/ca/ca.crt"; } >"/tmp/.agentsession/ca-bundle.crt"' in agent["command"][2]
    assert "ca-bundle" not in {m["name"] for m in container(pod, "agentctl")["volumeMounts"]}
    assert restricted_violations(pod) == []


def test_the_operator_default_ca_bundle_applies_unless_the_session_names_one() -> None:
    config = CONFIG.model_copy(update={"ca_bundle": CABundleSource(configMapName="cluster-ca")})
    volumes = {v["name"]: v for v in pod_for({}, config)["spec"]["volumes"]}
    assert volumes["ca-bundle"]["configMap"]["name"] == "cluster-ca"
    own = pod_for({"agent": {"caBundle": {"configMapName": "mine"}}}, config)
    assert {v["name"]: v for v in own["spec"]["volumes"]}["ca-bundle"]["configMap"]["name"] == "mine"
    assert "ca-bundle" not in {v["name"] for v in pod_for({})["spec"]["volumes"]}


def test_the_model_endpoint_reaches_each_agent_its_own_way() -> None:
    config = OperatorConfig(image="agentsession:test")
    model = {"baseURL": "http://llm-proxy:8080/v1", "name": "small"}
    claude = container(pod_for({"agent": {"type": "claude-code", "model": model}}, config), "agent")
    env = {e["name"]: e["value"] for e in claude["env"]}
    assert env["ANTHROPIC_BASE_URL"] == "http://llm-proxy:8080/v1"
    assert env["ANTHROPIC_MODEL"] == "small"
    codex = container(pod_for({"agent": {"type": "codex", "model": model}}, config), "agent")
    argv = codex["command"][3:]
    assert 'model_providers.agentsession.base_url="http://llm-proxy:8080/v1"' in argv
    assert 'model="small"' in argv
    plain = container(pod_for({"agent": {"type": "codex"}}, config), "agent")
    assert not any("model_providers" in arg for arg in plain["command"])
    # The profile's own arguments stay ahead of the model's.
    assert argv[1:6] == [
        "codex-acp",
        "-c",
        'sandbox_mode="danger-full-access"',
        "-c",
        'approval_policy="untrusted"',
    ]


def test_workspace_ownership_is_the_group_agent_and_agentctl_share() -> None:
    pod = pod_for({})
    security = pod["spec"]["securityContext"]
    assert security["fsGroup"] == 65532
    assert security["fsGroupChangePolicy"] == "OnRootMismatch"
    for name in ("agent", "agentctl"):
        assert container(pod, name)["securityContext"]["runAsGroup"] == 65532


def test_configured_profiles_replace_only_the_fields_they_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AGENTSESSION_AGENT_PROFILES",
        '{"codex": {"image": "registry.example/agentsession-codex:1.2"},'
        ' "aider": {"image": "aider:1", "command": ["aider", "--acp"]}}',
    )
    config = OperatorConfig()
    codex = config.agent_profiles["codex"]
    assert codex.image == "registry.example/agentsession-codex:1.2"
    assert codex.command == ["codex-acp"]
    assert codex.state_dirs == ["CODEX_HOME"]
    assert config.agent_profiles["aider"].command == ["aider", "--acp"]
    assert config.agent_profiles["claude-code"].image == "agentsession-claude-code:dev"


# The agent's default ephemeral-storage bounds, which every container has whatever the session leaves out.
DISK = ({"ephemeral-storage": "256Mi"}, {"ephemeral-storage": "12Gi"})


@pytest.mark.parametrize(
    ("resources", "requests", "limits"),
    [
        # A request above the default limit raises that limit; the others keep their defaults.
        ({"requests": {"memory": "4Gi"}}, {"memory": "4Gi"}, {"cpu": "2", "memory": "4Gi"}),
        ({"requests": {"cpu": 3}}, {"cpu": "3"}, {"cpu": "3", "memory": "2Gi"}),
        # A limit below the default request lowers that request.
        ({"limits": {"memory": "64Mi"}}, {"cpu": "100m", "memory": "64Mi"}, {"memory": "64Mi"}),
        ({"limits": {"cpu": "50m"}}, {"cpu": "50m", "memory": "128Mi"}, {"cpu": "50m"}),
        # Both given: the session's own, as written.
        ({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}, {"cpu": "1"}, {"cpu": "1"}),
    ],
)
def test_defaults_never_make_requests_exceed_limits(
    resources: dict[str, Any], requests: dict[str, str], limits: dict[str, str]
) -> None:
    agent = container(pod_for({"agent": {"resources": resources}}), "agent")
    assert agent["resources"] == {"requests": {**requests, **DISK[0]}, "limits": {**limits, **DISK[1]}}
    agentctl = container(pod_for({"agentctl": {"resources": resources}}), "agentctl")
    for name, quantity in agentctl["resources"].get("requests", {}).items():
        limit = agentctl["resources"].get("limits", {}).get(name)
        assert limit is None or parse_quantity(quantity) <= parse_quantity(limit)
