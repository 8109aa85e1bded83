"""The chart, rendered offline: lint, every documented values file, restricted pods, RBAC, policies, monitoring."""

from __future__ import annotations

import base64
import fnmatch
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import CHART, CI_VALUES, Manifest, Render, by_kind, one, run_helm
from tests.conftest import CRD_FILES
from tests.support.metric_names import exported_series, metric_names
from tests.support.pod_security import restricted_violations

VALUES_CASES = [pytest.param(None, id="default"), *(pytest.param(f, id=f.stem) for f in CI_VALUES)]
NAMESPACE_MODE = CHART / "ci" / "namespace-mode-values.yaml"
DEV = CHART / "ci" / "dev-values.yaml"
MONITORING = CHART / "ci" / "monitoring-values.yaml"
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "Namespace",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def _files(values: Path | None) -> list[Path]:
    return [values] if values else []


def _pod_specs(manifests: list[Manifest]) -> list[tuple[str, Manifest]]:
    pods = []
    for m in manifests:
        if m["kind"] == "Pod":
            pods.append((m["metadata"]["name"], m))
        elif m["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            pods.append((m["metadata"]["name"], m["spec"]["template"]))
    return pods


def _container(deployment: Manifest, name: str) -> Manifest:
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    return containers[name]


def test_documented_values_files_exist() -> None:
    assert {f.name for f in CI_VALUES} >= {
        "namespace-mode-values.yaml",
        "dev-values.yaml",
        "monitoring-values.yaml",
    }
    for f in CI_VALUES:
        assert f.read_text().startswith("#"), f"{f.name} must say what it is for in a leading comment"


@pytest.mark.parametrize("values", VALUES_CASES)
def test_helm_lint_strict(helm: str, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)]
    for f in _files(values):
        args += ["-f", str(f)]
    run_helm(helm, *args)


@pytest.mark.parametrize("values", VALUES_CASES)
def test_template_renders_valid_objects(render: Render, values: Path | None) -> None:
    manifests = render(*_files(values))
    assert manifests
    names: set[tuple[str, str, str]] = set()
    for m in manifests:
        meta = m["metadata"]
        key = (m["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in names, f"rendered twice: {key}"
        names.add(key)
        assert len(meta["name"]) <= 63, meta["name"]
        if m["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, f"{key} is cluster-scoped"
        else:
            assert meta.get("namespace"), (
                f"{key} has no namespace: `kubectl apply` of the output would misplace it"
            )
        labels = meta.get("labels", {})
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", key
        assert labels.get("app.kubernetes.io/instance") == "agentsession", key
        assert "helm.sh/chart" in labels, key


@pytest.mark.parametrize("values", VALUES_CASES)
def test_every_pod_meets_the_restricted_standard(render: Render, values: Path | None) -> None:
    for name, pod in _pod_specs(render(*_files(values))):
        assert restricted_violations(pod) == [], name
        spec = pod["spec"]
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert container["resources"].get("requests"), name
            assert container["resources"].get("limits"), name


# ---------------------------------------------------------------- the CRD comes from crds/, never a copy


def test_chart_crds_are_the_generated_files() -> None:
    in_chart = sorted((CHART / "crds").iterdir())
    assert [p.name for p in in_chart] == sorted(f.name for f in CRD_FILES)
    for link in in_chart:
        assert link.is_symlink(), f"the chart must link the generated {link.name}, not keep a copy"
        assert link.resolve() == (CRD_FILES[0].parent / link.name).resolve()
    copies = [
        p for p in CHART.rglob("*.yaml") if "CustomResourceDefinition" in p.read_text() and p not in in_chart
    ]
    assert copies == [], f"hand-kept CRD copies in the chart: {copies}"


def test_rendered_crds_equal_crds_files(render: Render) -> None:
    rendered = by_kind(render(include_crds=True), "CustomResourceDefinition")
    generated = [doc for f in CRD_FILES for doc in yaml.safe_load_all(f.read_text()) if doc]
    assert len(rendered) == len(generated)
    assert {d["metadata"]["name"]: d for d in rendered} == {d["metadata"]["name"]: d for d in generated}


def test_packaged_chart_carries_the_crds_themselves(helm: str, tmp_path: Path) -> None:
    """`helm package` must dereference the links: a chart archive holds each file, byte for byte."""
    run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("agentsession-*.tgz")
    with tarfile.open(archive) as tar:
        for crd_file in CRD_FILES:
            member = tar.extractfile(f"agentsession/crds/{crd_file.name}")
            assert member is not None
            assert member.read() == crd_file.read_bytes()
        assert "agentsession/values.schema.json" in tar.getnames()


# ---------------------------------------------------------------- operator


def test_operator_is_one_replica_recreated(render: Render) -> None:
    manifests = render()
    deployment = one(manifests, "Deployment", "-operator")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not [e for e in _container(deployment, "operator")["env"] if "LEADER" in e["name"]]
    assert sorted(m["metadata"]["name"] for m in by_kind(manifests, "PodDisruptionBudget")) == [
        "agentsession-egress-proxy",
        "agentsession-gateway",
    ]
    assert not [m for m in manifests if m["metadata"]["name"].endswith("-lease")]
    container = _container(deployment, "operator")
    assert container["command"][0] == "agentsession-operator"
    assert "--liveness-port=8081" in container["command"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False


@pytest.mark.parametrize(
    ("sets", "replicas", "budget"),
    [
        (["operator.replicas=2"], 2, True),
        (["operator.leaderElection.enabled=true"], 1, False),
        (["operator.replicas=3", "operator.leaderElection.retryPeriodSeconds=1"], 3, True),
    ],
    ids=["two-replicas", "one-replica-elected", "three-replicas"],
)
def test_a_leader_elected_operator_rolls_and_may_touch_only_its_lease(
    render: Render, monkeypatch: pytest.MonkeyPatch, sets: list[str], replicas: int, budget: bool
) -> None:
    manifests = render(set=sets, release="prod", namespace="ops")
    deployment = one(manifests, "Deployment", "-operator")
    assert deployment["spec"]["replicas"] == replicas
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    config = _operator_config(deployment, monkeypatch)
    assert config.leader_election is True
    assert (config.leader_election_namespace, config.leader_election_lease_name) == (
        "ops",
        "prod-agentsession-operator",
    )
    assert config.leader_election_lease_duration_seconds == 15
    assert config.leader_election_renew_deadline_seconds == 10
    assert config.leader_election_retry_period_seconds == (1 if replicas == 3 else 2)
    spread = deployment["spec"]["template"]["spec"].get("affinity")
    assert bool(spread) is (replicas > 1)
    budgets = [m["metadata"]["name"] for m in by_kind(manifests, "PodDisruptionBudget")]
    assert ("prod-agentsession-operator" in budgets) is budget
    role = one(manifests, "Role", "-operator-lease")
    assert role["metadata"]["namespace"] == "ops"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["prod-agentsession-operator"],
            "verbs": ["get", "patch"],
        },
    ]
    binding = one(manifests, "RoleBinding", "-operator-lease")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prod-agentsession-operator", "namespace": "ops"}
    ]


def _operator_config(deployment: Manifest, monkeypatch: pytest.MonkeyPatch) -> Any:
    from agentsession.controller.config import OperatorConfig

    for key in [k for k in __import__("os").environ if k.startswith("AGENTSESSION_")]:
        monkeypatch.delenv(key)
    for env in _container(deployment, "operator")["env"]:
        monkeypatch.setenv(env["name"], env["value"])
    return OperatorConfig()


@pytest.mark.parametrize(
    ("values", "sets", "namespaces"),
    [
        (None, [], []),
        (NAMESPACE_MODE, [], ["team-a", "team-b"]),
        (None, ["rbac.scope=namespace"], ["agentsession-system"]),
        (None, ["watchNamespaces={ns1}"], ["ns1"]),
    ],
    ids=["cluster", "namespace-mode", "namespace-default", "cluster-scope-some-namespaces"],
)
def test_operator_env_is_a_valid_operator_config(
    render: Render,
    monkeypatch: pytest.MonkeyPatch,
    values: Path | None,
    sets: list[str],
    namespaces: list[str],
) -> None:
    """The settings the chart passes parse as the operator's own config: a renamed setting fails here."""
    config = _operator_config(one(render(*_files(values), set=sets), "Deployment", "-operator"), monkeypatch)
    assert config.namespaces == namespaces
    assert config.image == "agentsession:0.1.0"
    assert config.metrics_port == 8080
    assert config.agentctl_resources.limits == {"cpu": "1", "memory": "256Mi", "ephemeral-storage": "1Gi"}


def test_session_pods_users_images_and_disk_bounds_come_from_the_values(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentsession.controller.config import OperatorConfig

    defaults = _operator_config(one(render(), "Deployment", "-operator"), monkeypatch)
    for field in ("run_as_user", "agentctl_run_as_user", "agentctl_images", "workspace_size_limit",
                  "agentctl_resources", "agent_resources"):  # fmt: skip
        assert getattr(defaults, field) == getattr(OperatorConfig.model_construct(), field), field
    manifests = render(
        set=["operator.sessionUsers.agent=1000", "operator.sessionUsers.agentctl=1001",
             "operator.workspaceSizeLimit=3Gi", "operator.agentctlImages={registry.example/agentctl:2}"]
    )  # fmt: skip
    config = _operator_config(one(manifests, "Deployment", "-operator"), monkeypatch)
    assert (config.run_as_user, config.agentctl_run_as_user) == (1000, 1001)
    assert config.workspace_size_limit == "3Gi"
    assert config.agentctl_images == ["registry.example/agentctl:2"]


@pytest.mark.parametrize(
    ("values", "sets", "namespaces", "dev_mode"),
    [
        (None, [], [], False),
        (NAMESPACE_MODE, [], ["team-a", "team-b"], False),
        (DEV, [], [], True),
    ],
    ids=["cluster", "namespace-mode", "dev"],
)
def test_gateway_command_is_a_valid_gateway_config(
    render: Render,
    monkeypatch: pytest.MonkeyPatch,
    values: Path | None,
    sets: list[str],
    namespaces: list[str],
    dev_mode: bool,
) -> None:
    """The flags the chart passes parse with the gateway's own parser: a renamed flag fails here."""
    config_module = pytest.importorskip("agentsession.gateway.config")
    for key in [k for k in __import__("os").environ if k.startswith("AGENTSESSION_")]:
        monkeypatch.delenv(key)
    container = _container(one(render(*_files(values), set=sets), "Deployment", "-gateway"), "gateway")
    assert container["command"][0] == "agentsession-gateway"
    config = config_module.parse_args(container["command"][1:])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (config.port, config.metrics_port) == (ports["http"], ports["metrics"])
    assert config.namespaces == namespaces
    assert config.insecure_dev_mode is dev_mode
    # Tokens for the gateway alone by default; dev mode serves /ws on the pod's loopback only.
    assert config.token_audiences == ([] if dev_mode else ["agentsession-gateway"])
    assert config.host == ("127.0.0.1" if dev_mode else "0.0.0.0")


def test_dev_values_use_the_local_image(render: Render, monkeypatch: pytest.MonkeyPatch) -> None:
    manifests = render(DEV)
    config = _operator_config(one(manifests, "Deployment", "-operator"), monkeypatch)
    assert (config.image, config.image_pull_policy) == ("agentsession:dev", "Never")
    for _, pod in _pod_specs(manifests):
        for container in pod["spec"]["containers"]:
            assert (container["image"], container["imagePullPolicy"]) == ("agentsession:dev", "Never")


def test_agent_images_follow_the_project_image_and_can_be_overridden(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _operator_config(one(render(DEV), "Deployment", "-operator"), monkeypatch)
    assert config.agent_profiles["claude-code"].image == "agentsession-claude-code:dev"
    assert config.agent_profiles["codex"].command == ["codex-acp"]
    assert config.ca_bundle is None
    manifests = render(
        set=[
            "image.repository=registry.example/agentsession",
            "agents.gemini.image=gemini:7",
            "agents.codex.env.RUST_LOG=warn",
            "caBundle.configMapName=corp-ca",
        ]
    )
    config = _operator_config(one(manifests, "Deployment", "-operator"), monkeypatch)
    profiles = config.agent_profiles
    assert profiles["claude-code"].image == "registry.example/agentsession-claude-code:0.1.0"
    assert profiles["gemini"].image == "gemini:7"
    assert profiles["codex"].env == {"CODEX_HOME": "$(HOME)/.codex", "RUST_LOG": "warn"}
    assert config.ca_bundle is not None
    assert (config.ca_bundle.configMapName, config.ca_bundle.key) == ("corp-ca", "ca.crt")


# ---------------------------------------------------------------- RBAC, statically (the cluster test impersonates)


def _rules(manifests: list[Manifest], component: str) -> list[tuple[str, Manifest]]:
    """(namespace or '' for cluster-wide, rule) for every rule bound to one component's service account."""
    out = []
    for m in manifests:
        if m["kind"] in ("ClusterRole", "Role") and m["metadata"]["labels"].get(
            "app.kubernetes.io/component"
        ) == (component):
            out += [(m["metadata"].get("namespace", ""), r) for r in m["rules"]]
    return out


@pytest.mark.parametrize("values", [None, NAMESPACE_MODE], ids=["cluster", "namespace"])
def test_rbac_grants_no_wildcards_and_no_secret_listing(render: Render, values: Path | None) -> None:
    manifests = render(*_files(values))
    for component in ("operator", "gateway", "egress-proxy"):
        rules = _rules(manifests, component)
        assert rules, component
        for _, rule in rules:
            assert "*" not in rule["verbs"], rule
            assert "*" not in rule["resources"], rule
            assert "*" not in rule.get("apiGroups", []), rule
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
            if "secrets" in rule["resources"]:
                # By name only: the operator hands a pool pod's token Secret to its session and deletes those
                # of pods a pool no longer needs; the egress proxy reads a session's credentials Secret to put
                # its key into model calls. Neither enumerates them.
                assert component != "gateway", f"the gateway derives tokens and reads no Secret: {rule}"
                allowed = {"get", "create", "patch", "delete"} if component == "operator" else {"get"}
                assert set(rule["verbs"]) <= allowed, rule


@pytest.mark.parametrize("values", [None, NAMESPACE_MODE], ids=["cluster", "namespace"])
def test_the_gateway_is_granted_no_secret_access_anywhere(render: Render, values: Path | None) -> None:
    """Acceptance: with the defaults, nothing the chart binds to the gateway names Secrets, in any namespace."""
    manifests = render(*_files(values))
    gateway_roles = {
        b["roleRef"]["name"] for b in manifests
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["name"] == "agentsession-gateway" for s in b["subjects"])
    }  # fmt: skip
    assert gateway_roles, "the gateway is bound to its roles"
    for role in manifests:
        if role["kind"] in ("Role", "ClusterRole") and role["metadata"]["name"] in gateway_roles:
            for rule in role["rules"]:
                assert "secrets" not in rule["resources"], rule
                assert "*" not in rule["resources"], rule
    # The built-in role the gateway's reviews need grants create on the two review kinds only.
    assert gateway_roles - {
        r["metadata"]["name"] for r in manifests if r["kind"] in ("Role", "ClusterRole")
    } == {"system:auth-delegator"}


def test_the_release_key_is_one_secret_mounted_into_both_programs(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifests = render()
    secret = one(manifests, "Secret", "-agentctl-key")
    assert secret["metadata"]["namespace"] == "agentsession-system"
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert len(base64.b64decode(secret["data"]["key"])) == 64
    assert render()[manifests.index(secret)]["data"] != secret["data"], "no cluster to look up: a new key"
    operator, gateway = one(manifests, "Deployment", "-operator"), one(manifests, "Deployment", "-gateway")
    for deployment in (operator, gateway):
        (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v]
        assert volume["secret"]["secretName"] == "agentsession-agentctl-key"
    config = _operator_config(operator, monkeypatch)
    assert str(config.agentctl_key_file) == "/var/run/secrets/agentsession.dev/agentctl-key/key"
    assert (
        "--agentctl-key-file=/var/run/secrets/agentsession.dev/agentctl-key/key"
        in _container(gateway, "gateway")["command"]
    )
    own = render(set=["agentctlKey.existingSecret=my-key"])
    assert not [m for m in own if m["kind"] == "Secret"]
    for deployment in (one(own, "Deployment", "-operator"), one(own, "Deployment", "-gateway")):
        (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v]
        assert volume["secret"]["secretName"] == "my-key"


def test_the_gateway_policy_lists_every_field_of_a_sessions_spec(render: Render) -> None:
    """The policy compares each spec field but suspend: a field added to the API must be added to it."""
    from agentsession.api.models import AgentSessionSpec

    policy = one(render(), "ValidatingAdmissionPolicy", "-gateway-sessions")
    compared = {
        m.group(1) for v in policy["spec"]["validations"]
        if (m := re.search(r"object\.spec\.\?(\w+) == oldObject\.spec\.\?\1", v["expression"]))
    }  # fmt: skip
    assert compared == set(AgentSessionSpec.model_fields) - {"suspend"}


@pytest.mark.parametrize("values", [None, NAMESPACE_MODE], ids=["cluster", "namespace"])
def test_admission_policies_bind_the_two_accounts(render: Render, values: Path | None) -> None:
    manifests = render(*_files(values))
    policies = {p["metadata"]["name"]: p for p in by_kind(manifests, "ValidatingAdmissionPolicy")}
    assert set(policies) == {
        f"agentsession-{name}"
        for name in ("operator-pods", "operator-secrets", "operator-claims", "operator-network-policies",
                     "gateway-sessions")
    }  # fmt: skip
    bindings = by_kind(manifests, "ValidatingAdmissionPolicyBinding")
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(policies)
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in binding["spec"], "every namespace, whatever the scope"
    for name, policy in policies.items():
        assert policy["spec"]["failurePolicy"] == "Fail"
        (condition,) = policy["spec"]["matchConditions"]
        account = "gateway" if "gateway" in name else "operator"
        assert condition["expression"] == (
            f"request.userInfo.username == 'system:serviceaccount:agentsession-system:agentsession-{account}'"
        )
    assert by_kind(render(set=["rbac.admissionPolicies=false"]), "ValidatingAdmissionPolicy") == []


def test_namespace_mode_has_no_cluster_wide_grants(render: Render) -> None:
    manifests = render(NAMESPACE_MODE, set=["rbac.admissionPolicies=false"])
    assert by_kind(manifests, "ClusterRole") == []
    # The one cluster-wide binding is the gateway's create-only access to token and access reviews.
    (binding,) = by_kind(manifests, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == "system:auth-delegator"
    assert [s["name"] for s in binding["subjects"]] == ["agentsession-gateway"]
    roles = by_kind(manifests, "Role")
    # Besides the Roles in each served namespace, the operator reads the egress proxy's Service in its own.
    assert sorted((r["metadata"]["namespace"], r["metadata"]["name"]) for r in roles) == [
        ("agentsession-system", "agentsession-operator-egress-proxy"),
        *[
            (ns, f"agentsession-{c}")
            for ns in ("team-a", "team-b")
            for c in ("egress-proxy", "gateway", "operator")
        ],
    ]


def test_namespace_mode_without_gateway_auth_needs_no_cluster_objects(render: Render) -> None:
    manifests = render(NAMESPACE_MODE, set=["gateway.auth.enabled=false", "rbac.admissionPolicies=false"])
    assert [m for m in manifests if m["kind"] in CLUSTER_SCOPED] == []
    gateway = one(manifests, "Deployment", "-gateway")
    assert "--insecure-dev-mode" in _container(gateway, "gateway")["command"]


def test_cluster_mode_binds_cluster_roles(render: Render) -> None:
    manifests = render()
    bindings = {b["metadata"]["name"]: b for b in by_kind(manifests, "ClusterRoleBinding")}
    assert bindings["agentsession-operator"]["roleRef"]["name"] == "agentsession-operator"
    assert bindings["agentsession-gateway"]["roleRef"]["name"] == "agentsession-gateway"
    assert bindings["agentsession-gateway-auth-delegator"]["roleRef"]["name"] == "system:auth-delegator"
    aggregated = [
        r for r in by_kind(manifests, "ClusterRole") if r["metadata"]["name"] == "agentsession-edit"
    ]
    assert aggregated[0]["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"


def test_rbac_create_false_renders_no_rbac(render: Render) -> None:
    manifests = render(set=["rbac.create=false"])
    assert not [
        m for m in manifests if m["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    ]


# ---------------------------------------------------------------- NetworkPolicy, gateway, monitoring


@pytest.mark.parametrize(
    ("values", "sets"), [(None, []), (NAMESPACE_MODE, [])], ids=["cluster", "namespace-mode"]
)
def test_the_operator_keeps_the_agentctl_policy_and_may_write_it(
    render: Render, monkeypatch: pytest.MonkeyPatch, values: Path | None, sets: list[str]
) -> None:
    """The operator, not the chart, puts the policy in each namespace where it creates pods (cluster scope serves
    namespaces the chart cannot list); the chart tells it whom the policy admits."""
    manifests = render(*_files(values), set=sets)
    assert by_kind(manifests, "NetworkPolicy") == []
    config = _operator_config(one(manifests, "Deployment", "-operator"), monkeypatch)
    policy = config.agentctl_network_policy
    assert policy is not None
    assert policy.name == "agentsession-agentctl"
    assert policy.client_namespace == "agentsession-system"
    assert policy.client_labels == {
        "app.kubernetes.io/name": "agentsession",
        "app.kubernetes.io/instance": "agentsession",
    }
    rules = [r for _, r in _rules(manifests, "operator") if "networkpolicies" in r["resources"]]
    assert rules
    assert [set(r["verbs"]) for r in rules] == [{"get", "create", "patch"}] * len(rules)
    # The policy's clients are the chart's own pods: they carry the labels it admits.
    for name in ("-operator", "-gateway"):
        labels = one(manifests, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert policy.client_labels.items() <= labels.items()
        assert labels["app.kubernetes.io/component"] in ("operator", "gateway")
    off = render(set=["networkPolicy.enabled=false"])
    assert _operator_config(one(off, "Deployment", "-operator"), monkeypatch).agentctl_network_policy is None
    assert not [r for _, r in _rules(off, "operator") if "networkpolicies" in r["resources"]]


def test_gateway_replicas_service_and_disruption_budget(render: Render) -> None:
    manifests = render()
    gateway = one(manifests, "Deployment", "-gateway")
    assert gateway["spec"]["replicas"] == 2
    container = _container(gateway, "gateway")
    assert container["command"][:3] == ["agentsession-gateway", "--port=8090", "--metrics-port=8091"]
    # Probes on the metrics port: it answers on the pod's address in dev mode too, where /ws is on loopback.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    annotations = gateway["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "8091"
    service = one(manifests, "Service", "-gateway")
    assert service["spec"]["selector"] == gateway["spec"]["selector"]["matchLabels"]
    # Clients' Service: /ws and the console only; /metrics has a Service of its own, which the kubectl plugin's
    # label selector for the gateway does not find.
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    metrics = one(manifests, "Service", "-gateway-metrics")
    assert metrics["spec"]["selector"] == gateway["spec"]["selector"]["matchLabels"]
    assert [p["targetPort"] for p in metrics["spec"]["ports"]] == ["metrics"]
    assert metrics["metadata"]["labels"]["app.kubernetes.io/component"] != "gateway"
    pdb = one(manifests, "PodDisruptionBudget", "-gateway")
    assert pdb["spec"]["selector"] == gateway["spec"]["selector"]
    assert pdb["spec"]["maxUnavailable"] == 1
    # One replica and a budget would block every node drain.
    assert by_kind(render(DEV), "PodDisruptionBudget") == []
    assert not [m for m in render(set=["gateway.enabled=false"]) if "gateway" in m["metadata"]["name"]]


# ---------------------------------------------------------------- the egress proxy

EGRESS_PROXY_RULES = [
    {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["agentsession.dev"], "resources": ["agentsessions"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["agentsession.dev"], "resources": ["agentsessions/status"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]


def _flags(command: list[str], name: str) -> list[str]:
    return [arg.split("=", 1)[1] for arg in command if arg.startswith(f"--{name}=")]


def test_the_egress_proxy_runs_with_its_probes_service_and_prices(render: Render) -> None:
    manifests = render()
    proxy = one(manifests, "Deployment", "-egress-proxy")
    labels = proxy["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "egress-proxy"
    assert proxy["spec"]["replicas"] == 2
    spec = proxy["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "agentsession-egress-proxy"
    assert spec["enableServiceLinks"] is False
    assert spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    container = _container(proxy, "egress-proxy")
    command = container["command"]
    assert command[:3] == ["agentsession-egress-proxy", "--port=8080", "--metrics-port=8093"]
    assert _flags(command, "git-hosts") == ["github.com"]
    assert _flags(command, "connect-ports") == ["443"]
    assert _flags(command, "namespaces") == []
    assert _flags(command, "default-budget") == []
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"proxy": 8080, "metrics": 8093}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    service = one(manifests, "Service", "-egress-proxy")
    assert service["spec"]["selector"] == proxy["spec"]["selector"]["matchLabels"]
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "proxy": (8080, "proxy"),
        "metrics": (8093, "metrics"),
    }
    # The price table is a file of the pod, in the shape the proxy reads.
    (prices_file,) = _flags(command, "prices-file")
    (mount,) = [m for m in container["volumeMounts"] if prices_file.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    configmap = one(manifests, "ConfigMap", "-egress-proxy-prices")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    prices = yaml.safe_load(configmap["data"][prices_file.rsplit("/", 1)[1]])
    assert {p["provider"] for p in prices} == {"anthropic", "openai", "gemini"}
    for entry in prices:
        assert set(entry) == {"provider", "model", "inputPerMTok", "outputPerMTok", "cachedPerMTok"}, entry
    for model in ("claude-opus-4-5-20251101", "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001",
                  "gpt-5", "gpt-5-codex", "gpt-5-mini", "gemini-2.5-pro", "gemini-2.5-flash"):  # fmt: skip
        matching = [p for p in prices if fnmatch.fnmatchcase(model, p["model"])]
        assert len(matching) == 1, f"{model}: priced by {matching}"
    pdb = one(manifests, "PodDisruptionBudget", "-egress-proxy")
    assert pdb["spec"]["selector"] == proxy["spec"]["selector"]
    assert pdb["spec"]["maxUnavailable"] == 1


def test_egress_proxy_flags_follow_the_values(render: Render) -> None:
    manifests = render(
        NAMESPACE_MODE,
        set=[
            "egressProxy.defaultAllow={pypi.org,*.npmjs.org}",
            "egressProxy.defaultBudget.maxCostUSD=2.50",
            "egressProxy.defaultBudget.maxRequests=100",
            "egressProxy.git.hosts={github.com,gitlab.example}",
            "egressProxy.connectPorts={443,8443}",
            "egressProxy.resolve.api\\.anthropic\\.com=10.0.0.7:8443",
            "egressProxy.upstreamCA.configMapName=stand-in-ca",
        ],
    )
    container = _container(one(manifests, "Deployment", "-egress-proxy"), "egress-proxy")
    command = container["command"]
    assert _flags(command, "namespaces") == ["team-a", "team-b"]
    assert _flags(command, "default-allow") == ["pypi.org", "*.npmjs.org"]
    assert [json.loads(b) for b in _flags(command, "default-budget")] == [
        {"maxCostUSD": "2.50", "maxRequests": 100}
    ]
    assert _flags(command, "git-hosts") == ["github.com", "gitlab.example"]
    assert _flags(command, "connect-ports") == ["443", "8443"]
    assert _flags(command, "resolve") == ["api.anthropic.com=10.0.0.7:8443"]
    (ca_file,) = _flags(command, "upstream-ca-file")
    (mount,) = [m for m in container["volumeMounts"] if ca_file == m["mountPath"] + "/ca.crt"]
    spec = one(manifests, "Deployment", "-egress-proxy")["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "stand-in-ca"


def test_the_operator_points_sessions_at_the_egress_proxy(render: Render) -> None:
    manifests = render(set=["egressProxy.defaultBudget.maxTokens=1000000", "egressProxy.port=3128"])
    env = {
        e["name"]: e["value"]
        for e in _container(one(manifests, "Deployment", "-operator"), "operator")["env"]
    }
    setting = json.loads(env["AGENTSESSION_EGRESS_PROXY"])
    assert setting == {
        "serviceNamespace": "agentsession-system",
        "serviceName": "agentsession-egress-proxy",
        "port": 3128,
        "gitHosts": ["github.com"],
    }
    service = one(manifests, "Service", "-egress-proxy")
    assert (service["metadata"]["name"], service["metadata"]["namespace"]) == (
        setting["serviceName"],
        setting["serviceNamespace"],
    )
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["proxy"] == setting["port"]
    assert json.loads(env["AGENTSESSION_DEFAULT_BUDGET"]) == {"maxTokens": 1000000}
    # The session pods' NetworkPolicy admits the proxy's pods by the release's client labels and its component.
    policy = json.loads(env["AGENTSESSION_AGENTCTL_NETWORK_POLICY"])
    labels = one(manifests, "Deployment", "-egress-proxy")["spec"]["template"]["metadata"]["labels"]
    assert policy["clientLabels"].items() <= labels.items()


def test_the_operators_egress_settings_parse_as_its_config(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentsession.controller.config import OperatorConfig

    if "egress_proxy" not in OperatorConfig.model_fields:
        pytest.skip("the operator has no egress_proxy setting in this tree")
    config = _operator_config(one(render(), "Deployment", "-operator"), monkeypatch)
    assert config.egress_proxy.service_name == "agentsession-egress-proxy"
    assert config.egress_proxy.git_hosts == ["github.com"]


@pytest.mark.parametrize("values", [None, NAMESPACE_MODE], ids=["cluster", "namespace"])
def test_the_egress_proxy_is_granted_exactly_its_list(render: Render, values: Path | None) -> None:
    manifests = render(*_files(values))
    roles = [
        r for r in manifests
        if r["kind"] in ("Role", "ClusterRole") and r["metadata"]["name"] == "agentsession-egress-proxy"
    ]  # fmt: skip
    assert roles
    for role in roles:
        assert role["rules"] == EGRESS_PROXY_RULES
    expected_namespaces = ["team-a", "team-b"] if values else [None]
    assert [r["metadata"].get("namespace") for r in roles] == expected_namespaces
    bindings = [
        b for b in manifests
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["name"] == "agentsession-egress-proxy" for s in b["subjects"])
    ]  # fmt: skip
    assert {b["roleRef"]["name"] for b in bindings} == {"agentsession-egress-proxy"}
    assert len(bindings) == len(roles)
    account = one(manifests, "ServiceAccount", "-egress-proxy")
    assert account["metadata"]["labels"]["app.kubernetes.io/component"] == "egress-proxy"


def test_one_egress_proxy_replica_has_no_disruption_budget(render: Render) -> None:
    assert not [m for m in by_kind(render(DEV), "PodDisruptionBudget") if "egress" in m["metadata"]["name"]]
    assert not [
        m for m in by_kind(render(set=["egressProxy.replicas=3", "egressProxy.podDisruptionBudget.enabled=false"]),
                           "PodDisruptionBudget") if "egress" in m["metadata"]["name"]
    ]  # fmt: skip
    assert one(render(set=["egressProxy.replicas=3"]), "PodDisruptionBudget", "-egress-proxy")


@pytest.mark.parametrize(
    "values", [None, NAMESPACE_MODE, MONITORING], ids=["cluster", "namespace", "monitoring"]
)
def test_disabling_the_egress_proxy_removes_it_and_the_operators_settings(
    render: Render, values: Path | None
) -> None:
    manifests = render(*_files(values), set=["egressProxy.enabled=false"])
    assert [m["kind"] for m in manifests if "egress" in m["metadata"]["name"]] == []
    assert [
        m for m in manifests if m["metadata"]["labels"].get("app.kubernetes.io/component") == "egress-proxy"
    ] == []
    env = {e["name"] for e in _container(one(manifests, "Deployment", "-operator"), "operator")["env"]}
    assert not {"AGENTSESSION_EGRESS_PROXY", "AGENTSESSION_DEFAULT_BUDGET"} & env
    for monitor in by_kind(manifests, "ServiceMonitor"):
        assert "egress-proxy" not in monitor["spec"]["selector"]["matchExpressions"][0]["values"]
    script = one(manifests, "Pod", "-test-health")["spec"]["containers"][0]["args"][0]
    assert "egress" not in script


def test_monitoring_objects_are_optional(render: Render) -> None:
    default = render()
    assert by_kind(default, "ServiceMonitor") == []
    assert by_kind(default, "PrometheusRule") == []
    manifests = render(MONITORING)
    monitor = one(manifests, "ServiceMonitor")
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"metrics"}
    services = {s["metadata"]["name"]: s for s in by_kind(manifests, "Service")}
    for endpoint in monitor["spec"]["endpoints"]:
        assert any(endpoint["port"] in {p["name"] for p in s["spec"]["ports"]} for s in services.values())
    # The ServiceMonitor finds both metrics Services, and not the gateway's clients' Service.
    components = monitor["spec"]["selector"]["matchExpressions"][0]["values"]
    scraped = {
        n for n, s in services.items() if s["metadata"]["labels"]["app.kubernetes.io/component"] in components
    }
    assert scraped == {
        "agentsession-operator-metrics",
        "agentsession-gateway-metrics",
        "agentsession-egress-proxy",
    }


def test_alerts_cover_the_operations_that_matter_and_use_real_metrics(render: Render) -> None:
    rule = one(render(MONITORING), "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "AgentSessionOperatorDown",
        "AgentSessionReconcileErrors",
        "AgentSessionsFailed",
        "AgentSessionStartupSlow",
        "AgentSessionGatewaySlowConsumers",
    } <= set(alerts)
    known = exported_series()
    for name, alert in alerts.items():
        assert alert["labels"]["severity"] in ("critical", "warning"), name
        assert alert["annotations"]["summary"], name
        assert alert["annotations"]["description"], name
        assert alert.get("for"), f"{name} would fire on a single bad scrape"
        used = metric_names(alert["expr"])
        assert used, f"{name}: no metric found in {alert['expr']!r}"
        assert used <= known, f"{name} uses metrics no component exports: {used - known}"


def test_grafana_dashboard_configmap(render: Render) -> None:
    configmap = one(render(), "ConfigMap", "-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["agentsession.json"])
    assert dashboard["uid"]
    assert dashboard["title"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    known = exported_series()
    for panel in panels:
        for target in panel["targets"]:
            used = metric_names(target["expr"])
            assert used, f"panel {panel['title']!r}: no metric found in {target['expr']!r}"
            assert used <= known, (
                f"panel {panel['title']!r} queries metrics no component exports: {used - known}"
            )
    # Variables: Grafana's label_values(METRIC, LABEL).
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            metric = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["definition"])
            assert metric, variable["definition"]
            assert metric.group(1) in known, f"variable {variable['name']} reads {metric.group(1)}"
    assert one(render(MONITORING), "ConfigMap", "-dashboard")["metadata"]["namespace"] == "monitoring"


def test_helm_test_hook_checks_both_components(render: Render) -> None:
    pod = one(render(), "Pod", "-test-health")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["args"][0]
    assert "/healthz" in script
    assert "/readyz" in script
    assert compile(script, "test-health", "exec")


@pytest.mark.parametrize(
    "bad",
    [
        "rbac.scope=everywhere",
        "image.pullPolicy=Sometimes",
        "gateway.port=70000",
        "watchNamespaces={Not_A_Namespace}",
        "unknownTopLevelKey=1",
        "operator.logFormat=xml",
        "operator.replicas=-1",
        "operator.leaderElection.leaseDurationSeconds=1",
        "operator.sessionUsers.agentctl=0",
        "operator.workspaceSizeLimit=",
        "egressProxy.defaultAllow={https://example.com}",
        "egressProxy.defaultBudget.maxCostUSD=five",
        "egressProxy.prices[0].provider=mistral,egressProxy.prices[0].model=m,egressProxy.prices[0].inputPerMTok=1,"
        "egressProxy.prices[0].outputPerMTok=1,egressProxy.prices[0].cachedPerMTok=1",
        "egressProxy.connectPorts={0}",
    ],
)
def test_schema_rejects_bad_values(helm: str, bad: str) -> None:
    proc = run_helm(helm, "template", "x", str(CHART), "--set", bad, check=False)
    assert proc.returncode != 0, f"--set {bad} was accepted"
    assert "schema" in proc.stderr, proc.stderr
