"""Generates the CustomResourceDefinitions of the API (AgentSession, AgentSessionPool) from its models.

`python -m agentsession.api.crd crds` writes `crds/<plural>.yaml` for each; a unit test fails when a committed
file drifts.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from agentsession.api.constants import (
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    MAX_POOL_NAME_LENGTH,
    PLURAL,
    POOL_KIND,
    POOL_PLURAL,
    POOL_SHORT_NAME,
    POOL_SINGULAR,
    SHORT_NAME,
    SINGULAR,
    VERSION,
)
from agentsession.api.models import (
    AgentSessionPoolSpec,
    AgentSessionPoolStatus,
    AgentSessionSpec,
    AgentSessionStatus,
)

Schema = dict[str, Any]

# Keys of pydantic's JSON Schema that a structural OpenAPI v3 schema either forbids or does not need.
_DROPPED_KEYS = {"title", "additionalProperties", "$defs"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
    {"name": "Agent", "type": "string", "jsonPath": ".spec.agent.type"},
    {"name": "Pod", "type": "string", "jsonPath": ".status.podName", "priority": 1},
    {"name": "Title", "type": "string", "jsonPath": ".spec.title", "priority": 1},
    # What the egress proxy metered (status.usage): `kubectl get -o wide` shows a session's spend.
    {"name": "Requests", "type": "integer", "jsonPath": ".status.usage.requests", "priority": 1},
    {"name": "Tokens-In", "type": "integer", "jsonPath": ".status.usage.inputTokens", "priority": 1},
    {"name": "Tokens-Out", "type": "integer", "jsonPath": ".status.usage.outputTokens", "priority": 1},
    {"name": "Cost", "type": "string", "jsonPath": ".status.usage.costUSD", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

POOL_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Claimed", "type": "integer", "jsonPath": ".status.claimed"},
    {"name": "Agent", "type": "string", "jsonPath": ".spec.template.agent.type"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


@dataclass(frozen=True)
class Definition:
    """What sets one kind of the API apart; the schema itself comes from its models."""

    kind: str
    plural: str
    singular: str
    short_name: str
    description: str
    spec: type[BaseModel]
    status: type[BaseModel]
    printer_columns: list[dict[str, Any]]
    max_name_length: int
    # Why the name is bounded, for the message of the API server's refusal.
    name_bound_by: str
    # A scale subresource on .spec.replicas, so `kubectl scale` resizes it as it does a Deployment.
    scalable: bool = False

    @property
    def file_name(self) -> str:
        return f"{self.plural}.yaml"


SESSION = Definition(
    kind=KIND,
    plural=PLURAL,
    singular=SINGULAR,
    short_name=SHORT_NAME,
    description="An ACP coding agent running as a pod with the agentctl sidecar.",
    spec=AgentSessionSpec,
    status=AgentSessionStatus,
    printer_columns=PRINTER_COLUMNS,
    max_name_length=MAX_NAME_LENGTH,
    name_bound_by="it prefixes the names of the session's pod, secret and volume claim",
)
POOL = Definition(
    kind=POOL_KIND,
    plural=POOL_PLURAL,
    singular=POOL_SINGULAR,
    short_name=POOL_SHORT_NAME,
    description="Pods of AgentSessions started ahead of them, for sessions to claim at their first start.",
    spec=AgentSessionPoolSpec,
    status=AgentSessionPoolStatus,
    printer_columns=POOL_PRINTER_COLUMNS,
    max_name_length=MAX_POOL_NAME_LENGTH,
    name_bound_by="it names the pool's pods, which prefix the names of their secrets and volume claims",
    scalable=True,
)
DEFINITIONS: tuple[Definition, ...] = (SESSION, POOL)


def _resolve(node: Any, defs: dict[str, Schema]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return {key: _resolve(value, defs) for key, value in node.items()}


def _structural(node: Schema) -> Schema:
    """Turns one resolved JSON Schema node into its structural OpenAPI v3 form."""
    node = dict(node)
    # An optional field is a union with null; its one other option may be a union itself (an optional quantity).
    while "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        types = sorted(o.get("type", "") for o in options)
        if node.pop("x-agentsession-quantity", False):
            node = _quantity(options, node)
        elif types == ["integer", "string"]:
            node["x-kubernetes-int-or-string"] = True
        elif len(options) == 1:
            node = {**options[0], **node}
        else:
            raise ValueError(f"unsupported union in CRD schema: {options}")
    if node.get("default", 0) is None:
        del node["default"]
    # A docstring wraps at the source's line length; `kubectl explain` would show its line breaks as they are.
    if isinstance(node.get("description"), str):
        node["description"] = " ".join(node["description"].split())
    values = node.pop("additionalProperties", None)
    if values is True:
        node["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(values, dict):
        node["values"] = _structural(values)
    if "properties" in node:
        node["properties"] = {name: _structural(child) for name, child in node["properties"].items()}
        node.setdefault("type", "object")
    if "items" in node:
        node["items"] = _structural(node["items"])
    node = {k: v for k, v in node.items() if k not in _DROPPED_KEYS}
    if "values" in node:
        node["additionalProperties"] = node.pop("values")
    return node


def _quantity(options: list[Schema], node: Schema) -> Schema:
    """A quantity the way controller-gen writes resource.Quantity: integer-or-string, the syntax as a pattern
    (which applies to strings only); the model's CEL rule refuses negative integers."""
    text = next(o for o in options if o.get("type") == "string")
    return {
        **node,
        "pattern": text["pattern"],
        "maxLength": text["maxLength"],
        "x-kubernetes-int-or-string": True,
    }


def openapi_schema(model: type[Any]) -> Schema:
    raw = model.model_json_schema(mode="validation")
    return _structural(_resolve(raw, raw.get("$defs", {})))


def crd_manifest(definition: Definition) -> dict[str, Any]:
    limit = definition.max_name_length
    schema: Schema = {
        "type": "object",
        "description": definition.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi_schema(definition.spec),
            "status": openapi_schema(definition.status),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"size(self.metadata.name) <= {limit}",
                "message": f"metadata.name must be at most {limit} characters ({definition.name_bound_by})",
                "reason": "FieldValueInvalid",
                "fieldPath": ".metadata",
            }
        ],
    }
    subresources: dict[str, Any] = {"status": {}}
    if definition.scalable:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{definition.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "agentsession", "app.kubernetes.io/part-of": "agentsession"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": definition.kind,
                "listKind": f"{definition.kind}List",
                "plural": definition.plural,
                "singular": definition.singular,
                "shortNames": [definition.short_name],
                "categories": ["all", "agents"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": definition.printer_columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def render(definition: Definition) -> str:
    header = "# Generated from operator/agentsession/api/models.py by `make crd`; do not edit by hand.\n"
    return header + yaml.safe_dump(crd_manifest(definition), sort_keys=False, width=110)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentsession.api.crd", description=__doc__)
    parser.add_argument("directory", type=Path, help="where each definition is written as <plural>.yaml")
    directory: Path = parser.parse_args(argv).directory
    for definition in DEFINITIONS:
        (directory / definition.file_name).write_text(render(definition))


if __name__ == "__main__":
    main()
