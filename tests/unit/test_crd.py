"""The CRDs are generated from the models and must not drift; samples validate against the models."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from agentsession.api.constants import MAX_NAME_LENGTH, MAX_POOL_NAME_LENGTH
from agentsession.api.crd import (
    DEFINITIONS,
    POOL,
    SESSION,
    Definition,
    _structural,
    crd_manifest,
    main,
    render,
)
from agentsession.api.models import AgentSessionPoolSpec, AgentSessionSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
INVALID = sorted((ROOT / "examples" / "invalid").glob("*.yaml"))
SPEC_MODELS = {"AgentSession": AgentSessionSpec, "AgentSessionPool": AgentSessionPoolSpec}
BY_KIND = pytest.mark.parametrize("definition", DEFINITIONS, ids=[d.kind for d in DEFINITIONS])


def _schema(definition: Definition = SESSION) -> dict[str, Any]:
    schema: dict[str, Any] = crd_manifest(definition)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@BY_KIND
def test_committed_crd_matches_the_models(definition: Definition) -> None:
    committed = (ROOT / "crds" / definition.file_name).read_text()
    assert committed == render(definition), (
        f"crds/{definition.file_name} drifted from the models: run `make crd`"
    )


def test_crds_holds_exactly_the_generated_files() -> None:
    assert sorted(p.name for p in (ROOT / "crds").iterdir()) == sorted(d.file_name for d in DEFINITIONS)


def _walk(node: dict[str, Any], path: str = "") -> list[str]:
    """Paths that break the structural-schema rules the API server enforces."""
    problems = [
        f"{path}: {key}" for key in ("anyOf", "oneOf", "allOf", "$ref", "title", "nullable") if key in node
    ]
    if not ({"type", "x-kubernetes-int-or-string"} & set(node)):
        problems.append(f"{path}: no type")
    for name, child in node.get("properties", {}).items():
        problems.extend(_walk(child, f"{path}.{name}"))
    if "items" in node:
        problems.extend(_walk(node["items"], f"{path}[]"))
    if isinstance(node.get("additionalProperties"), dict):
        problems.extend(_walk(node["additionalProperties"], f"{path}{{}}"))
    return problems


@BY_KIND
def test_schema_is_structural(definition: Definition) -> None:
    assert _walk(_schema(definition)) == []


def test_printer_columns_and_subresources() -> None:
    version = crd_manifest(SESSION)["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == [
        "Phase",
        "Ready",
        "Reason",
        "Agent",
        "Age",
    ]
    assert version["subresources"] == {"status": {}}
    assert crd_manifest(SESSION)["spec"]["names"]["shortNames"] == ["ags"]


def test_wide_columns_show_the_metered_usage() -> None:
    version = crd_manifest(SESSION)["spec"]["versions"][0]
    wide = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"] if c.get("priority") == 1}
    assert {name: wide.get(name) for name in ("Requests", "Tokens-In", "Tokens-Out", "Cost")} == {
        "Requests": ".status.usage.requests",
        "Tokens-In": ".status.usage.inputTokens",
        "Tokens-Out": ".status.usage.outputTokens",
        "Cost": ".status.usage.costUSD",
    }
    usage = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["usage"]["properties"]
    # Each column names a field the structural schema keeps (a pruned one would show as empty).
    for path in wide.values():
        if path.startswith(".status.usage."):
            assert path.removeprefix(".status.usage.") in usage


def test_pool_printer_columns_and_subresources() -> None:
    manifest = crd_manifest(POOL)
    assert manifest["metadata"]["name"] == "agentsessionpools.agentsession.dev"
    assert manifest["spec"]["names"]["kind"] == "AgentSessionPool"
    assert manifest["spec"]["names"]["shortNames"] == ["agspool"]
    version = manifest["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Desired": ".spec.replicas",
        "Ready": ".status.readyReplicas",
        "Claimed": ".status.claimed",
        "Agent": ".spec.template.agent.type",
        "Age": ".metadata.creationTimestamp",
    }
    assert version["subresources"] == {
        "status": {},
        "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
    }
    # Every spec or status path the columns and the scale subresource name exists in the schema.
    schema = _schema(POOL)
    for path in [*columns.values(), *version["subresources"]["scale"].values()]:
        if path.startswith(".metadata."):
            continue
        node = schema
        for part in path.strip(".").split("."):
            node = node["properties"][part]


@pytest.mark.parametrize(
    ("definition", "limit"),
    [(SESSION, MAX_NAME_LENGTH), (POOL, MAX_POOL_NAME_LENGTH)],
    ids=["session", "pool"],
)
def test_the_name_is_bounded_so_children_names_fit(definition: Definition, limit: int) -> None:
    (rule,) = _schema(definition)["x-kubernetes-validations"]
    assert rule["rule"] == f"size(self.metadata.name) <= {limit}"
    assert rule["message"].startswith(f"metadata.name must be at most {limit} characters (")


@BY_KIND
def test_descriptions_are_one_paragraph(definition: Definition) -> None:
    descriptions: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("description"), str):
                descriptions.append(node["description"])
            for value in node.values():
                collect(value)

    collect(_schema(definition))
    assert [d for d in descriptions if "\n" in d or "  " in d] == []


@BY_KIND
def test_every_cel_rule_has_a_message(definition: Definition) -> None:
    rules: list[dict[str, str]] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            rules.extend(node.get("x-kubernetes-validations", []))
            for value in node.values():
                collect(value)

    collect(_schema(definition))
    assert len(rules) >= 7
    assert all(rule["message"] and rule["rule"] and rule["reason"] == "FieldValueInvalid" for rule in rules)
    # A rule about one field of its object points at that field, so the error names it and not the object.
    for rule in rules:
        fields = set(re.findall(r"self\.(\w+)", rule["rule"]))
        if len(fields) == 1:
            assert rule.get("fieldPath", "").startswith(f".{fields.pop()}"), rule


def test_conditions_are_a_map_keyed_by_type() -> None:
    conditions = _schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_validate(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert documents
    for document in documents:
        assert document["kind"] in SPEC_MODELS, document["kind"]
        SPEC_MODELS[document["kind"]].model_validate(document["spec"])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("unknown-agent-type.yaml", "Input should be 'demo', 'claude-code', 'codex', 'gemini' or 'custom'"),
        ("bad-duration.yaml", "String should match pattern"),
    ],
)
def test_invalid_samples_fail_schema_validation_with_a_readable_message(name: str, message: str) -> None:
    document = yaml.safe_load((ROOT / "examples" / "invalid" / name).read_text())
    with pytest.raises(ValidationError, match=message):
        AgentSessionSpec.model_validate(document["spec"])


def test_every_invalid_sample_says_what_the_api_server_answers() -> None:
    # The integration tier applies each one to a real API server and expects this text.
    for path in INVALID:
        assert path.read_text().startswith("# expect: "), path.name


def _undescribed(node: dict[str, Any], path: str) -> list[str]:
    """Fields under `path` that `kubectl explain` would show as `<no description>`."""
    missing = [] if node.get("description") else [path]
    for name, child in (node.get("properties") or {}).items():
        missing += _undescribed(child, f"{path}.{name}")
    items = node.get("items")
    if isinstance(items, dict):
        for name, child in (items.get("properties") or {}).items():
            missing += _undescribed(child, f"{path}[].{name}")
    return missing


@BY_KIND
def test_kubectl_explain_describes_every_field_of_the_spec(definition: Definition) -> None:
    assert _undescribed(_schema(definition)["properties"]["spec"], "spec") == []


@pytest.mark.parametrize(
    ("node", "structural"),
    [
        ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"x-kubernetes-int-or-string": True}),
        (
            {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}], "default": None},
            {"x-kubernetes-int-or-string": True},
        ),
        ({"anyOf": [{"type": "string"}, {"type": "null"}], "title": "T"}, {"type": "string"}),
        (
            {"properties": {"a": {"type": "string", "title": "A"}}},
            {"properties": {"a": {"type": "string"}}, "type": "object"},
        ),
        (
            {"type": "object", "additionalProperties": True},
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        ),
        (
            {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
            {"type": "array", "items": {"type": "integer"}},
        ),
    ],
    ids=["int or string", "optional int or string", "optional", "object", "free-form object", "array"],
)
def test_json_schema_nodes_become_structural(node: dict[str, Any], structural: dict[str, Any]) -> None:
    assert _structural(node) == structural


def test_a_union_the_api_server_cannot_express_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unsupported union in CRD schema") as refused:
        _structural({"anyOf": [{"type": "object"}, {"type": "array"}]})
    assert "'array'" in str(refused.value)


def test_make_crd_writes_every_definition_into_crds(tmp_path: Path) -> None:
    main([str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(d.file_name for d in DEFINITIONS)
    for definition in DEFINITIONS:
        assert (tmp_path / definition.file_name).read_text() == render(definition)
    assert "\t$(PY) -m agentsession.api.crd crds\n" in (ROOT / "Makefile").read_text()
