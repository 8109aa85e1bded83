"""The session's children in detail: objects Kubernetes accepts field for field, containers that can run on a
read-only root, agentctl started the way agentctl parses it, the clone that really clones, and the pod hash."""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.utils.quantity import parse_quantity

from agentsession.agentctl.config import parse_config
from agentsession.api.models import AgentSessionSpec
from agentsession.api.session_ref import SessionRef
from agentsession.controller.config import AgentProfile, ModelWiring, OperatorConfig, Resources
from agentsession.controller.pod_builder import (
    SPEC_HASH_ANNOTATION,
    SpecError,
    build_pod,
    build_token_secret,
    build_workspace_claim,
    drain_timeout,
    pod_spec_hash,
)

SESSION = SessionRef(namespace="team-a", name="fix-bug", uid="1234-uid", generation=3)
CONFIG = OperatorConfig(
    image="agentsession:test",
    run_as_user=4242,
    agentctl_run_as_user=4343,
    agentctl_images=["example/agentctl:2"],
)
EVERYTHING: dict[str, Any] = {
    "agent": {
        "type": "custom",
        "image": "example/agent:1",
        "command": ["agent", "--acp"],
        "env": [{"name": "MODE", "value": "fast"}],
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
        "credentialsSecretRef": {"name": "keys"},
        "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}},
        "caBundle": {"configMapName": "corp-ca", "key": "bundle.pem"},
    },
    "agentctl": {"image": "example/agentctl:2", "resources": {"limits": {"cpu": "300m"}}},
    "workspace": {
        "size": "5Gi",
        "storageClassName": "fast",
        "repository": {"url": "https://example.com/r.git"},
    },
    "lifecycle": {"maxDuration": "2h", "drainTimeout": "45s", "restartPolicy": "Never"},
    "podTemplate": {
        "labels": {"team": "a"},
        "annotations": {"note": "hi"},
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "priorityClassName": "high",
    },
}
SPECS = {"defaults": {}, "everything": EVERYTHING}


def pod_for(spec: dict[str, Any], config: OperatorConfig = CONFIG) -> dict[str, Any]:
    return build_pod(SESSION, AgentSessionSpec.model_validate(spec), config)


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in containers(pod) if c["name"] == name)


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def as_kubernetes_reads_it(manifest: dict[str, Any], kind: str) -> Any:
    """The object after a trip through the Kubernetes client's models, which drop every field they do not know
    and refuse a field of the wrong type or a required field left out."""
    api = ApiClient()
    model = api.deserialize(json.dumps(manifest), kind, None)
    return api.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_every_field_of_the_children_is_one_kubernetes_knows(spec: dict[str, Any]) -> None:
    pod = pod_for(spec)
    assert as_kubernetes_reads_it(pod, "V1Pod") == pod
    secret = build_token_secret(SESSION, "t0ken")
    assert as_kubernetes_reads_it(secret, "V1Secret") == secret
    claim = build_workspace_claim(SESSION, AgentSessionSpec.model_validate(EVERYTHING))
    assert claim is not None
    assert as_kubernetes_reads_it(claim, "V1PersistentVolumeClaim") == claim


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_containers_run_unprivileged_on_a_read_only_root_with_writable_volumes(spec: dict[str, Any]) -> None:
    pod = pod_for(spec)
    pod_context = pod["spec"]["securityContext"]
    assert (pod_context["runAsUser"], pod_context["runAsGroup"], pod_context["fsGroup"]) == (4242, 4242, 4242)
    assert pod_context["runAsNonRoot"] is True
    assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
    # Only the workspace's root is checked for ownership: a large workspace remounts quickly.
    assert pod_context["fsGroupChangePolicy"] == "OnRootMismatch"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for c in containers(pod):
        context = c["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, c["name"]
        user = 4343 if c["name"] == "agentctl" else 4242
        assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (user, 4242, True)
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        writable = [m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")]
        assert all(m["name"] in volumes for m in c["volumeMounts"]), c["name"]
        if c["name"] == "layout":
            continue  # it runs one script in the volume, nothing that writes a dotfile
        # With a read-only root, HOME must be on a volume, or every tool that writes a dotfile fails.
        home = env_of(c)["HOME"]
        assert any(home == path or home.startswith(path.rstrip("/") + "/") for path in writable), (
            c["name"],
            home,
        )
        assert "/tmp" in writable, c["name"]


def test_scratch_volumes_are_bounded() -> None:
    volumes = {v["name"]: v for v in pod_for({})["spec"]["volumes"]}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": "1Gi"}
    assert parse_quantity(volumes["tmp"]["emptyDir"]["sizeLimit"]) == 2**30  # type: ignore[no-untyped-call]
    assert volumes["agentctl-tmp"]["emptyDir"] == {"sizeLimit": "256Mi"}
    # The FIFO pair never touches a disk.
    assert volumes["agentctl-fifo"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}
    assert volumes["workspace"] == {"name": "workspace", "emptyDir": {"sizeLimit": "10Gi"}}
    bounded = pod_for({}, CONFIG.model_copy(update={"workspace_size_limit": "3Gi"}))
    assert {v["name"]: v for v in bounded["spec"]["volumes"]}["workspace"]["emptyDir"] == {"sizeLimit": "3Gi"}


def test_agentctl_starts_with_arguments_agentctl_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCTL_TOKEN", "t0ken")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    pod = pod_for({"workspace": {"mountPath": str(workspace)}, "lifecycle": {"drainTimeout": "45s"}})
    agentctl = container(pod, "agentctl")
    assert agentctl["command"] == ["agentctl"]
    config = parse_config(agentctl["args"])
    assert config.port == 9999
    assert config.workdir == workspace
    assert config.state_dir == Path("/var/lib/agentctl/state")
    assert config.shell_umask == 0o002
    assert config.agent_fifo_dir == Path("/run/agentctl")
    assert config.transport_name == "fifo"
    assert config.drain_timeout == 45
    assert config.log_format == "json"
    assert agentctl["ports"] == [{"name": "agentctl", "containerPort": 9999, "protocol": "TCP"}]


def test_probes_ask_a_port_agentctl_declares_and_tell_not_ready_quickly() -> None:
    agentctl = container(pod_for({}), "agentctl")
    ports = {p["name"] for p in agentctl["ports"]}
    readiness, liveness = agentctl["readinessProbe"], agentctl["livenessProbe"]
    for probe in (readiness, liveness):
        assert probe["httpGet"]["port"] in ports
        assert probe["httpGet"]["path"] == "/health"
    # A session reads not-ready within two seconds of agentctl stopping to answer...
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= 2
    assert readiness["timeoutSeconds"] >= 1
    # ...but agentctl is restarted only after half a minute of silence, never for one slow answer.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 30
    assert liveness["failureThreshold"] > 1
    assert liveness["timeoutSeconds"] > readiness["timeoutSeconds"]


def test_agentctl_resources_are_the_sessions_with_the_operators_defaults_for_the_rest() -> None:
    config = OperatorConfig(
        image="x",
        agentctl_resources=Resources(requests={"cpu": "50m"}, limits={"cpu": "1", "memory": "256Mi"}),
    )
    assert container(pod_for({}, config), "agentctl")["resources"] == {
        "requests": {"cpu": "50m"},
        "limits": {"cpu": "1", "memory": "256Mi"},
    }
    own = pod_for({"agentctl": {"resources": {"limits": {"cpu": "300m"}}}}, config)
    assert container(own, "agentctl")["resources"] == {"requests": {"cpu": "50m"}, "limits": {"cpu": "300m"}}
    # With the default bounds, the disk's is kept whatever the session names.
    assert container(pod_for({"agentctl": {"resources": {"limits": {"cpu": "300m"}}}}), "agentctl")[
        "resources"
    ] == {
        "requests": {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "64Mi"},
        "limits": {"cpu": "300m", "ephemeral-storage": "1Gi"},
    }


@pytest.mark.parametrize(
    ("requests", "resources"),
    [
        # A request at the default limit keeps the limit; one above it raises the limit to the request.
        ({"cpu": "2"}, {"requests": {"cpu": "2"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
        ({"cpu": "3"}, {"requests": {"cpu": "3"}, "limits": {"cpu": "3", "memory": "2Gi"}}),
        ({"cpu": "1500m"}, {"requests": {"cpu": "1500m"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
    ],
)
def test_default_limits_meet_the_sessions_requests(
    requests: dict[str, str], resources: dict[str, Any]
) -> None:
    pod = pod_for({"agent": {"resources": {"requests": requests}}})
    assert container(pod, "agent")["resources"] == with_disk(resources)


def with_disk(resources: dict[str, Any]) -> dict[str, Any]:
    """`resources` and the agent's default ephemeral-storage bounds, which stay whatever the session names."""
    return {
        "requests": {**resources["requests"], "ephemeral-storage": "256Mi"},
        "limits": {**resources["limits"], "ephemeral-storage": "12Gi"},
    }


@pytest.mark.parametrize(
    ("limits", "resources"),
    [
        (
            {"memory": "128Mi"},
            {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "128Mi"}},
        ),
        ({"memory": "64Mi"}, {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}),
        ({"memory": "1Gi"}, {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}),
    ],
)
def test_default_requests_stay_within_the_sessions_limits(
    limits: dict[str, str], resources: dict[str, Any]
) -> None:
    pod = pod_for({"agent": {"resources": {"limits": limits}}})
    assert container(pod, "agent")["resources"] == with_disk(resources)


def test_everything_the_session_asks_of_its_pod_is_there() -> None:
    pod = pod_for(EVERYTHING)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert (spec["automountServiceAccountToken"], spec["enableServiceLinks"]) == (False, False)
    assert spec["activeDeadlineSeconds"] == 7200
    assert spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["tolerations"] == EVERYTHING["podTemplate"]["tolerations"]
    assert spec["affinity"] == EVERYTHING["podTemplate"]["affinity"]
    assert spec["priorityClassName"] == "high"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"] == {"claimName": "fix-bug-workspace"}
    assert volumes["ca-bundle"]["configMap"] == {
        "name": "corp-ca",
        "items": [{"key": "bundle.pem", "path": "ca.crt"}],
    }
    agentctl = container(pod, "agentctl")
    assert agentctl["image"] == "example/agentctl:2"
    assert agentctl["imagePullPolicy"] == "IfNotPresent"
    agent = container(pod, "agent")
    assert agent["envFrom"] == [
        {"configMapRef": {"name": "settings"}, "prefix": "APP_"},
        {"secretRef": {"name": "keys"}},
    ]
    assert {"name": "ca-bundle", "mountPath": "/etc/agentsession/ca", "readOnly": True} in agent[
        "volumeMounts"
    ]
    assert env_of(agent)["MODE"] == "fast"
    labels = pod["metadata"]["labels"]
    assert labels["team"] == "a"
    assert labels["app.kubernetes.io/component"] == "agent"
    assert pod["metadata"]["annotations"]["note"] == "hi"
    assert pod["metadata"]["name"] == "fix-bug-agent"


def test_a_session_that_restarts_by_default_keeps_its_pod_restarting() -> None:
    assert pod_for({})["spec"]["restartPolicy"] == "Always"
    assert pod_for({"lifecycle": {"restartPolicy": "Always"}})["spec"]["restartPolicy"] == "Always"
    assert "activeDeadlineSeconds" not in pod_for({})["spec"]


@pytest.mark.parametrize(("drain", "seconds"), [(None, 20.0), ("45s", 45.0), ("1m30s", 90.0), ("2.5s", 2.5)])
def test_the_grace_period_outlasts_the_drain_by_the_same_margin(drain: str | None, seconds: float) -> None:
    spec = {"lifecycle": {"drainTimeout": drain}} if drain else {}
    assert drain_timeout(AgentSessionSpec.model_validate(spec)) == seconds
    grace = pod_for(spec)["spec"]["terminationGracePeriodSeconds"]
    default_grace = pod_for({})["spec"]["terminationGracePeriodSeconds"]
    assert grace > seconds
    assert grace - math.ceil(seconds) == default_grace - 20


def test_the_token_secret_holds_the_token_for_agentctl_only() -> None:
    secret = build_token_secret(SESSION, "s3cr3t")
    assert secret["metadata"]["name"] == "fix-bug-agentctl-token"
    assert secret["metadata"]["namespace"] == "team-a"
    # A type of its own: the only one the operator may create (charts/agentsession/templates/admission-policies.yaml).
    assert secret["type"] == "agentsession.dev/agentctl-token"
    assert base64.b64decode(secret["data"]["token"]) == b"s3cr3t"
    assert secret["metadata"]["labels"]["app.kubernetes.io/component"] == "agentctl-token"
    assert [ref["uid"] for ref in secret["metadata"]["ownerReferences"]] == ["1234-uid"]


@pytest.mark.parametrize(
    ("workspace", "claim_spec"),
    [
        ({"size": "5Gi"}, {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}),
        (
            {"size": 1073741824, "storageClassName": "fast"},
            {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1073741824"}},
                "storageClassName": "fast",
            },
        ),
        ({"emptyDir": True}, None),
        (None, None),
    ],
    ids=["size", "integer size and a class", "scratch", "no workspace"],
)
def test_a_claim_exists_only_for_a_sized_workspace(
    workspace: dict[str, Any] | None, claim_spec: dict[str, Any] | None
) -> None:
    claim = build_workspace_claim(SESSION, AgentSessionSpec.model_validate({"workspace": workspace}))
    if claim_spec is None:
        assert claim is None
        return
    assert claim is not None
    assert claim["spec"] == claim_spec
    assert claim["metadata"]["name"] == "fix-bug-workspace"
    assert claim["metadata"]["labels"]["app.kubernetes.io/component"] == "workspace"


def test_the_pod_hash_follows_what_the_pod_is_and_nothing_else() -> None:
    pod = pod_for({})
    spec, metadata = pod["spec"], pod["metadata"]
    digest = metadata["annotations"][SPEC_HASH_ANNOTATION]
    assert len(digest) == 16
    assert int(digest, 16) >= 0
    assert pod_spec_hash(spec, metadata) == digest
    # Key order is not content.
    reordered = json.loads(json.dumps(spec, sort_keys=True))
    assert pod_spec_hash(dict(reversed(list(reordered.items()))), metadata) == digest
    # The hash does not cover itself.
    assert pod_spec_hash(spec, {**metadata, "annotations": {}}) == digest
    changed = [
        pod_spec_hash({**spec, "restartPolicy": "Never"}, metadata),
        pod_spec_hash(spec, {**metadata, "labels": {**metadata["labels"], "team": "b"}}),
        pod_spec_hash(spec, {**metadata, "annotations": {"note": "x"}}),
        pod_spec_hash(spec, {k: v for k, v in metadata.items() if k != "labels"}),
    ]
    assert len({digest, *changed}) == 5
    assert pod_spec_hash(spec, {}) == pod_spec_hash(spec, {"labels": {}, "annotations": {}})


def _git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """A repository with two commits on main and a branch `feature` with a file of its own."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    _git("init", "-q", "-b", "main", cwd=repo)
    for n in (1, 2):
        (repo / "README.md").write_text(f"version {n}\n")
        _git("add", "README.md", cwd=repo)
        _git("commit", "-q", "-m", f"v{n}", cwd=repo)
    _git("checkout", "-q", "-b", "feature", cwd=repo)
    (repo / "feature.txt").write_text("feature\n")
    _git("add", "feature.txt", cwd=repo)
    _git("commit", "-q", "-m", "feature", cwd=repo)
    _git("checkout", "-q", "main", cwd=repo)
    return repo


def _run_clone(pod: dict[str, Any], upstream: Path, home: Path) -> subprocess.CompletedProcess[str]:
    clone = container(pod, "clone")
    env = {
        "PATH": os.environ["PATH"],
        **env_of(clone),
        "HOME": str(home),
        # The spec's https URL leads to the local repository: nothing leaves this machine.
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{upstream.as_uri()}.insteadOf",
        "GIT_CONFIG_VALUE_0": "https://example.com/r.git",
    }
    return subprocess.run(clone["command"], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(("ref", "files"), [(None, ["README.md"]), ("feature", ["README.md", "feature.txt"])])
def test_the_clone_container_clones_the_ref_into_an_empty_workspace_once(
    tmp_path: Path, upstream: Path, ref: str | None, files: list[str]
) -> None:
    workspace = tmp_path / "my workspace"  # a path that needs quoting
    workspace.mkdir()
    repository = {"url": "https://example.com/r.git", **({"ref": ref} if ref else {})}
    pod = pod_for({"workspace": {"mountPath": str(workspace), "repository": repository}})
    clone = container(pod, "clone")
    assert clone["image"] == CONFIG.git_image
    assert clone["imagePullPolicy"] == CONFIG.image_pull_policy
    assert clone["resources"] == container(pod, "agentctl")["resources"]
    assert {"name": "workspace", "mountPath": str(workspace), "subPath": ".agentsession/workspace"} in clone[
        "volumeMounts"
    ]
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["clone", "agentctl"]

    first = _run_clone(pod, upstream, tmp_path)
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in workspace.iterdir() if p.name != ".git") == files
    assert _git("rev-list", "--count", "HEAD", cwd=workspace).strip() == "1"  # shallow: only the tip
    assert (workspace / "README.md").read_text() == "version 2\n"

    # A resumed session's work is never overwritten.
    (workspace / "README.md").write_text("my edits\n")
    again = _run_clone(pod, upstream, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "workspace already cloned" in again.stdout
    assert (workspace / "README.md").read_text() == "my edits\n"


def agent_argv(pod: dict[str, Any]) -> list[str]:
    """What the wrapper execs: the agent's command and arguments after `sh -c WRAPPER agent`."""
    command: list[str] = container(pod, "agent")["command"]
    assert command[:2] == ["sh", "-c"]
    assert command[3] == "agent"
    return command[4:]


def with_profile(**fields: Any) -> OperatorConfig:
    profile = AgentProfile(
        **{"image": "codex:1", "command": ["codex-acp"], "args": ["--from-profile"], **fields}
    )
    return CONFIG.model_copy(update={"agent_profiles": {"codex": profile}})


@pytest.mark.parametrize(
    ("agent", "argv"),
    [
        ({"type": "codex"}, ["codex-acp", "--from-profile"]),
        ({"type": "codex", "args": ["--mine"]}, ["codex-acp", "--mine"]),
        ({"type": "codex", "args": []}, ["codex-acp"]),  # an empty list clears the profile's arguments
        ({"type": "codex", "command": ["my-codex"]}, ["my-codex"]),  # another command: not the profile's args
        ({"type": "codex", "command": ["my-codex"], "args": ["-x"]}, ["my-codex", "-x"]),
    ],
)
def test_the_sessions_command_and_args_replace_the_profiles(agent: dict[str, Any], argv: list[str]) -> None:
    assert agent_argv(pod_for({"agent": agent}, with_profile())) == argv


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (
            {"type": "custom", "command": ["agent"]},
            "agent.type 'custom' has no default image in the operator's configuration: set spec.agent.image, "
            "or configure an image for this agent type",
        ),
        (
            {"type": "custom", "image": "x/y:1"},
            "agent.type 'custom' has no default command: set spec.agent.command",
        ),
    ],
)
def test_a_spec_error_says_what_to_set(agent: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as refused:
        pod_for({"agent": agent})
    assert str(refused.value) == message


def test_the_sessions_env_replaces_a_variable_where_it_stands() -> None:
    pod = pod_for(
        {
            "agent": {
                "type": "codex",
                "env": [{"name": "HOME", "value": "/home/me"}, {"name": "X", "value": "1"}],
            }
        }
    )
    names = [e["name"] for e in container(pod, "agent")["env"]]
    # One HOME, still first, so the profile's $(HOME) references expand to the session's.
    assert names == ["HOME", "CODEX_HOME", "X"]
    assert env_of(container(pod, "agent"))["HOME"] == "/home/me"


def test_home_is_under_the_workspace_however_its_path_is_written() -> None:
    pod = pod_for({"workspace": {"mountPath": "/work/"}})
    assert env_of(container(pod, "agent"))["HOME"] == "/work/.home"


def test_a_model_endpoint_without_a_name_sets_only_the_endpoint() -> None:
    model = {"baseURL": "https://llm.example.com/v1"}
    env = env_of(container(pod_for({"agent": {"type": "claude-code", "model": model}}), "agent"))
    assert env["ANTHROPIC_BASE_URL"] == "https://llm.example.com/v1"
    assert "ANTHROPIC_MODEL" not in env
    wired = with_profile(
        model=ModelWiring(args=["--url={baseURL}", "--model={name}"], name_args=["-m", "{name}"])
    )
    assert agent_argv(pod_for({"agent": {"type": "codex", "model": model}}, wired))[-2:] == [
        "--url=https://llm.example.com/v1",
        "--model=",
    ]


def test_an_agent_without_model_wiring_ignores_a_model_endpoint() -> None:
    pod = pod_for({"agent": {"type": "demo", "model": {"baseURL": "https://llm.example.com/v1"}}})
    assert agent_argv(pod) == ["agentsession-demo-agent"]


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        # The same amount written another way is not "above" or "below": the session's own value stands.
        (
            {"requests": {"cpu": "2000m"}},
            {"requests": {"cpu": "2000m"}, "limits": {"cpu": "2", "memory": "2Gi"}},
        ),
        (
            {"limits": {"memory": "134217728"}},
            {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "134217728"}},
        ),
    ],
)
def test_equal_quantities_in_other_units_are_left_alone(
    resources: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert container(pod_for({"agent": {"resources": resources}}), "agent")["resources"] == with_disk(
        expected
    )


def _quantities(node: Any, key: str = "") -> list[str]:
    if isinstance(node, dict):
        return [q for k, v in node.items() for q in _quantities(v, k)]
    if isinstance(node, list):
        return [q for item in node for q in _quantities(item, key)]
    return [node] if key in {"sizeLimit", "cpu", "memory", "storage"} else []


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_every_quantity_in_the_pod_is_one_kubernetes_parses(spec: dict[str, Any]) -> None:
    quantities = _quantities(pod_for(spec)["spec"])
    assert len(quantities) >= 6
    for quantity in quantities:
        parse_quantity(quantity)  # type: ignore[no-untyped-call]


def test_a_short_max_duration_still_gives_the_pod_a_second() -> None:
    assert pod_for({"lifecycle": {"maxDuration": "500ms"}})["spec"]["activeDeadlineSeconds"] == 1
    assert pod_for({"lifecycle": {"maxDuration": "90s"}})["spec"]["activeDeadlineSeconds"] == 90


def test_the_children_are_core_v1_objects_with_the_recommended_labels() -> None:
    claim = build_workspace_claim(SESSION, AgentSessionSpec.model_validate({"workspace": {"size": "1Gi"}}))
    assert claim is not None
    children = [pod_for({}), build_token_secret(SESSION, "t"), claim]
    assert [(c["apiVersion"], c["kind"]) for c in children] == [
        ("v1", "Pod"),
        ("v1", "Secret"),
        ("v1", "PersistentVolumeClaim"),
    ]
    for child in children:
        labels = child["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "agentsession"
        assert labels["app.kubernetes.io/part-of"] == "agentsession"
        assert labels["app.kubernetes.io/instance"] == "fix-bug"
        assert labels["app.kubernetes.io/managed-by"] == "agentsession-operator"
        assert labels["agentsession.dev/name"] == "fix-bug"


def test_the_pod_hash_of_a_given_pod_stays_the_same_across_operator_versions() -> None:
    # Running pods carry the hash an older operator wrote; a new way of computing it would replace them all.
    spec = {"containers": [{"name": "agent", "image": "x"}]}
    metadata = {"labels": {"app": "a"}, "annotations": {"note": "n", SPEC_HASH_ANNOTATION: "old"}}
    assert pod_spec_hash(spec, metadata) == "f821d04797cc2599"
