"""Generates the AgentSession CustomResourceDefinition from the pydantic models.

`python -m agentsession.api.crd > crds/agentsessions.yaml`; a unit test fails when the committed file drifts.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from agentsession.api.constants import GROUP, KIND, MAX_NAME_LENGTH, PLURAL, SHORT_NAME, SINGULAR, VERSION
from agentsession.api.models import AgentSessionSpec, AgentSessionStatus

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
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


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


def crd_manifest() -> dict[str, Any]:
    spec = openapi_schema(AgentSessionSpec)
    status = openapi_schema(AgentSessionStatus)
    schema: Schema = {
        "type": "object",
        "description": "An ACP coding agent running as a pod with the agentctl sidecar.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [
            {
                "rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                "message": f"metadata.name must be at most {MAX_NAME_LENGTH} characters "
                "(it prefixes the names of the session's pod, secret and volume claim)",
                "reason": "FieldValueInvalid",
                "fieldPath": ".metadata",
            }
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "agentsession", "app.kubernetes.io/part-of": "agentsession"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": ["all", "agents"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def render() -> str:
    header = "# Generated from operator/agentsession/api/models.py by `make crd`; do not edit by hand.\n"
    return header + yaml.safe_dump(crd_manifest(), sort_keys=False, width=110)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
