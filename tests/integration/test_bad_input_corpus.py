"""A corpus of AgentSession specs, right and wrong, against the real API server.

Every case is created with server-side dry run. A rejected case must be refused with an error that names its
field. An accepted case must parse in the operator's own models, and the Pod, claim and Secret its pod builder
makes must pass a server-side dry-run create too: "accepted but impossible" cannot come back unnoticed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentsession.api.constants import GROUP, PLURAL, VERSION
from agentsession.api.models import AgentSessionSpec
from agentsession.api.session_ref import SessionRef
from agentsession.controller.config import OperatorConfig
from agentsession.controller.pod_builder import build_pod, build_token_secret, build_workspace_claim

pytestmark = pytest.mark.cluster


@dataclass(frozen=True)
class Case:
    id: str
    spec: dict[str, Any]
    field: str | None = None  # None: accepted; else the field the API server's error must name


def _at(path: str, value: Any) -> dict[str, Any]:
    """{"a": {"b": value}} for "a.b"."""
    result: Any = value
    for part in reversed(path.split(".")):
        result = {part: result}
    return result


QUANTITY_FIELDS = (
    "agent.resources.requests.cpu",
    "agent.resources.limits.memory",
    "agentctl.resources.requests.memory",
    "workspace.size",
)
# 0.5 is refused: a CRD field is integer-or-string at most (a Pod would take it; "0.5" works everywhere).
BAD_QUANTITIES: tuple[Any, ...] = (
    "abc",
    "5 Gi",
    "-1Gi",
    "1.5.5",
    "Gi",
    "1GiB",
    "0x10",
    -1,
    {"a": 1},
    True,
    0.5,
)
GOOD_QUANTITIES: tuple[Any, ...] = ("500m", "2Gi", "1.5Gi", "1e3", 2, "0.5", "10G")

CASES: list[Case] = [
    *(
        Case(
            f"{path}={json.dumps(bad)}",
            _at(path, bad),
            path.rsplit(".", 2)[0] if "resources" in path else path,
        )
        for path in QUANTITY_FIELDS
        for bad in BAD_QUANTITIES
    ),
    *(
        Case(f"{path}={json.dumps(good)}", _at(path, good))
        for path in QUANTITY_FIELDS
        for good in GOOD_QUANTITIES
    ),
    Case("workspace.size=0", {"workspace": {"size": 0}}, "workspace.size"),
    Case("workspace.size='0'", {"workspace": {"size": "0"}}, "workspace.size"),
    Case(
        "memory request above limit",
        {"agent": {"resources": {"requests": {"memory": "4Gi"}, "limits": {"memory": "2Gi"}}}},
        "agent.resources.requests",
    ),
    Case(
        "cpu request above limit",
        {"agent": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "500m"}}}},
        "agent.resources.requests",
    ),
    Case(
        "numeric cpu request above limit",
        {"agentctl": {"resources": {"requests": {"cpu": 2}, "limits": {"cpu": "1.5"}}}},
        "agentctl.resources.requests",
    ),
    Case(
        "a request alone above the default limit", {"agent": {"resources": {"requests": {"memory": "4Gi"}}}}
    ),
    Case("a limit alone below the default request", {"agent": {"resources": {"limits": {"cpu": "50m"}}}}),
    Case(
        "an agentctl request alone above its default limit",
        {"agentctl": {"resources": {"requests": {"memory": "2Gi"}}}},
    ),
    Case(
        "an agentctl limit alone below its default request",
        {"agentctl": {"resources": {"limits": {"cpu": "10m"}}}},
    ),
    Case(
        "request equal to limit", {"agent": {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": 1}}}}
    ),
    *(
        Case(f"mountPath={path}", {"workspace": {"emptyDir": True, "mountPath": path}}, "workspace.mountPath")
        for path in (
            "/tmp",
            "/tmp/work",
            "/run/agentctl",
            "/var/lib/agentctl",
            "/",
            "/etc/agentsession/ca",
            "/proc",
            "relative",
        )
    ),
    *(
        Case(f"mountPath={path}", {"workspace": {"emptyDir": True, "mountPath": path}})
        for path in ("/work", "/home/a/ws")
    ),
    *(
        Case(f"label key {key!r}", {"podTemplate": {"labels": {key: "v"}}}, "podTemplate.labels")
        for key in ("bad key", "-start", "a/b/c", "Upper.Example.com/x", "x" * 64, "")
    ),
    *(
        Case(f"label value {value!r}", {"podTemplate": {"labels": {"k": value}}}, "podTemplate.labels")
        for value in ("has space", "x" * 64, "-lead", "trail-")
    ),
    Case("labels that are fine", {"podTemplate": {"labels": {"app.kubernetes.io/name": "ok", "team": ""}}}),
    *(
        Case(
            f"annotation key {key!r}", {"podTemplate": {"annotations": {key: "v"}}}, "podTemplate.annotations"
        )
        for key in ("bad key", "/x", "a/b/c")
    ),
    Case(
        "any annotation value",
        {"podTemplate": {"annotations": {"example.com/note": "free text: with spaces!"}}},
    ),
    Case("nodeSelector key", {"podTemplate": {"nodeSelector": {"bad key": "v"}}}, "podTemplate.nodeSelector"),
    Case(
        "nodeSelector value", {"podTemplate": {"nodeSelector": {"disk": "s s d"}}}, "podTemplate.nodeSelector"
    ),
    Case("nodeSelector", {"podTemplate": {"nodeSelector": {"kubernetes.io/os": "linux"}}}),
    Case(
        "toleration operator",
        {"podTemplate": {"tolerations": [{"key": "k", "operator": "Sometimes"}]}},
        "operator",
    ),
    Case("toleration effect", {"podTemplate": {"tolerations": [{"key": "k", "effect": "NoExec"}]}}, "effect"),
    Case(
        "toleration Exists with a value",
        {"podTemplate": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}},
        "tolerations[0].value",
    ),
    Case("toleration without key", {"podTemplate": {"tolerations": [{"value": "v"}]}}, "tolerations[0].key"),
    Case(
        "tolerationSeconds without NoExecute",
        {"podTemplate": {"tolerations": [{"key": "k", "tolerationSeconds": 5}]}},
        "tolerations[0].tolerationSeconds",
    ),
    Case(
        "toleration unknown field",
        {"podTemplate": {"tolerations": [{"key": "k", "operater": "Equal"}]}},
        "operater",
    ),
    Case(
        "tolerations that are fine",
        {
            "podTemplate": {
                "tolerations": [
                    {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
                    {"operator": "Exists"},
                    {
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 30,
                    },
                ]
            }
        },
    ),
    Case("valueFrom empty", {"agent": {"env": [{"name": "A", "valueFrom": {}}]}}, "agent.env[0].valueFrom"),
    Case(
        "valueFrom two sources",
        {
            "agent": {
                "env": [
                    {
                        "name": "A",
                        "valueFrom": {
                            "secretKeyRef": {"name": "s", "key": "k"},
                            "configMapKeyRef": {"name": "c", "key": "k"},
                        },
                    }
                ]
            }
        },
        "agent.env[0].valueFrom",
    ),
    Case(
        "secretKeyRef without key",
        {"agent": {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]}},
        "key",
    ),
    Case(
        "value and valueFrom",
        {
            "agent": {
                "env": [{"name": "A", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
            }
        },
        "agent.env[0].valueFrom",
    ),
    Case("env name with space", {"agent": {"env": [{"name": "A B", "value": "x"}]}}, "agent.env[0].name"),
    Case(
        "env that is fine",
        {
            "agent": {
                "env": [
                    {"name": "A", "value": "x"},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}},
                    {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ]
            }
        },
    ),
    Case("envFrom empty entry", {"agent": {"envFrom": [{}]}}, "agent.envFrom[0]"),
    Case(
        "envFrom two sources",
        {"agent": {"envFrom": [{"configMapRef": {"name": "c"}, "secretRef": {"name": "s"}}]}},
        "agent.envFrom[0]",
    ),
    Case("envFrom without name", {"agent": {"envFrom": [{"configMapRef": {}}]}}, "name"),
    Case(
        "envFrom bad prefix",
        {"agent": {"envFrom": [{"prefix": "1 x", "secretRef": {"name": "s"}}]}},
        "prefix",
    ),
    Case("envFrom that is fine", {"agent": {"envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "c"}}]}}),
    *(
        Case(f"{field}={value}", {"lifecycle": {field: value}}, f"lifecycle.{field}")
        for field, value in (
            ("maxDuration", "0s"),
            ("maxDuration", "10000h"),
            ("maxDuration", "1d"),
            ("maxDuration", "5"),
            ("idleTimeout", "0.5s"),
            ("idleTimeout", "9000h"),
            ("drainTimeout", "2h"),
            ("drainTimeout", "0s"),
        )
    ),
    Case(
        "idleTimeout not below maxDuration",
        {"lifecycle": {"idleTimeout": "2h", "maxDuration": "1h"}},
        "lifecycle.idleTimeout",
    ),
    Case("restartPolicy", {"lifecycle": {"restartPolicy": "Sometimes"}}, "lifecycle.restartPolicy"),
    Case(
        "lifecycle that is fine",
        {"lifecycle": {"idleTimeout": "15m", "maxDuration": "8h", "drainTimeout": "30s"}},
    ),
    Case("unknown agent type", {"agent": {"type": "copilot"}}, "agent.type"),
    Case("custom without image", {"agent": {"type": "custom", "command": ["x"]}}, "agent.type"),
    Case(
        "custom with model",
        {"agent": {"type": "custom", "image": "x:1", "command": ["x"], "model": {"baseURL": "http://m"}}},
        "agent.model",
    ),
    Case(
        "model URL not http",
        {"agent": {"type": "codex", "model": {"baseURL": "ftp://m"}}},
        "agent.model.baseURL",
    ),
    Case("image with space", {"agent": {"image": "my image"}}, "agent.image"),
    Case("empty command", {"agent": {"type": "custom", "image": "x:1", "command": []}}, "agent.command"),
    Case("pull policy", {"agent": {"imagePullPolicy": "Sometimes"}}, "agent.imagePullPolicy"),
    Case(
        "secret name",
        {"agent": {"credentialsSecretRef": {"name": "Bad_Name"}}},
        "agent.credentialsSecretRef.name",
    ),
    Case(
        "ca bundle key", {"agent": {"caBundle": {"configMapName": "ca", "key": "a b"}}}, "agent.caBundle.key"
    ),
    Case("size and emptyDir", {"workspace": {"size": "1Gi", "emptyDir": True}}, "workspace.emptyDir"),
    Case(
        "storageClass without size", {"workspace": {"storageClassName": "fast"}}, "workspace.storageClassName"
    ),
    Case(
        "repository URL",
        {"workspace": {"emptyDir": True, "repository": {"url": "file:///etc"}}},
        "repository.url",
    ),
    Case("cwd relative", {"cwd": "work"}, "spec.cwd"),
    Case(
        "priorityClassName",
        {"podTemplate": {"priorityClassName": "High_Priority"}},
        "podTemplate.priorityClassName",
    ),
    # As `kubectl apply` does, the corpus asks for strict field validation: a misspelt field is an error.
    Case("unknown field", {"agnet": {"type": "demo"}}, "agnet"),
    Case(
        "a full spec that is fine",
        {
            "agent": {
                "type": "claude-code",
                "credentialsSecretRef": {"name": "keys"},
                "model": {"baseURL": "https://llm.example.com", "name": "m"},
                "resources": {
                    "requests": {"cpu": "0.25", "memory": "512Mi"},
                    "limits": {"cpu": "1", "memory": "2Gi"},
                },
            },
            "agentctl": {"resources": {"requests": {"cpu": "50m"}}},
            "workspace": {
                "size": "5Gi",
                "mountPath": "/work",
                "repository": {"url": "https://example.com/r.git"},
            },
            "title": "t",
            "cwd": "/work",
            "mode": "code",
            "prompt": "hi",
            "lifecycle": {"idleTimeout": "10m", "maxDuration": "2h", "restartPolicy": "Never"},
            "podTemplate": {
                "labels": {"team": "a"},
                "annotations": {"note": "x"},
                "nodeSelector": {"kubernetes.io/os": "linux"},
            },
        },
    ),
]


def test_the_corpus_is_large_and_ids_are_unique() -> None:
    assert len(CASES) >= 100
    assert len({case.id for case in CASES}) == len(CASES)


def _dry_run(create: Callable[[], Any]) -> tuple[Any, ApiException | None]:
    try:
        return create(), None
    except ApiException as error:
        return None, error


@pytest.fixture(scope="module")
def apis(kube_api: Any) -> tuple[Any, Any]:
    return client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_each_spec_is_refused_by_name_or_makes_children_the_api_server_accepts(
    case: Case, apis: tuple[Any, Any], crd_installed: list[str], namespace: str
) -> None:
    custom, core = apis
    name = f"c-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentSession",
        "metadata": {"name": name},
        "spec": case.spec,
    }
    created, refused = _dry_run(
        lambda: custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict"
        )
    )
    if refused is not None:
        assert case.field is not None, f"refused although fine: {refused.body}"
        assert refused.status in (400, 422), refused.body  # 400: strict decoding (unknown fields)
        message = json.loads(refused.body)["message"]
        assert case.field in message, message
        return
    assert case.field is None, f"accepted, though {case.field} is wrong"
    spec = AgentSessionSpec.model_validate(created["spec"])
    session = SessionRef(namespace, name, str(uuid.uuid4()), 1)
    config = OperatorConfig(image="agentsession:dev")
    children = [build_token_secret(session, "t"), build_pod(session, spec, config)]
    claim = build_workspace_claim(session, spec)
    if claim is not None:
        children.append(claim)
    creators = {
        "Secret": core.create_namespaced_secret,
        "Pod": core.create_namespaced_pod,
        "PersistentVolumeClaim": core.create_namespaced_persistent_volume_claim,
    }
    for child in children:
        _, refused = _dry_run(lambda child=child: creators[child["kind"]](namespace, child, dry_run="All"))
        assert refused is None, (
            f"the API server accepted the spec but refused its {child['kind']}: {refused.body}"
        )
