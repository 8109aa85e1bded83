"""The rules the models hand to the API server (CEL, in the CRD) and the status lookups the operator relies on.

The CRD's rules are generated once, as the models are defined; these tests call the generators directly, so a
rule that would name the wrong field or lose its reason fails here and not only against a real API server."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from agentsession.api.models import (
    LABEL_KEY,
    LABEL_VALUE,
    POD_SHAPE_FIELDS,
    AgentSessionSpec,
    AgentSessionStatus,
    Condition,
    PoolTemplate,
    _keys_and_values,
    _rules,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_every_rule_is_refused_as_an_invalid_field_value() -> None:
    assert _rules(("self.a > 0", "a must be positive")) == {
        "x-kubernetes-validations": [
            {"rule": "self.a > 0", "message": "a must be positive", "reason": "FieldValueInvalid"}
        ]
    }


def test_a_rule_about_one_field_points_at_it_and_the_order_is_kept() -> None:
    validations = _rules(
        ("self.a > 0", "a must be positive", ".a"),
        ("self.b != ''", "b must not be empty"),
        ("self.c < 3", "c must be below 3", ".c"),
    )["x-kubernetes-validations"]
    assert [(v["rule"], v.get("fieldPath")) for v in validations] == [
        ("self.a > 0", ".a"),
        ("self.b != ''", None),
        ("self.c < 3", ".c"),
    ]
    assert {v["reason"] for v in validations} == {"FieldValueInvalid"}


def test_no_rules_is_an_empty_list_not_a_missing_key() -> None:
    assert _rules() == {"x-kubernetes-validations": []}


def _patterns(rule: str) -> list[str]:
    return re.findall(r"matches\(r'([^']*)'\)", rule)


def _map_rules(field: str, what: str, *, values: bool) -> list[dict[str, str]]:
    validations: list[dict[str, str]] = _rules(*_keys_and_values(field, what, values=values))[
        "x-kubernetes-validations"
    ]
    return validations


def test_map_keys_and_values_are_checked_as_label_syntax_on_the_field() -> None:
    keys, values = _map_rules("labels", "podTemplate.labels", values=True)
    for validation in (keys, values):
        assert validation["fieldPath"] == ".labels"
        # Only a map that is there is checked, and every entry of it.
        assert validation["rule"].startswith("!has(self.labels) || self.labels.all(k, ")
    assert _patterns(keys["rule"]) == [LABEL_KEY]
    # A prefix of at most 253 characters, its '/', and a name of at most 63.
    assert "size(k) <= 317" in keys["rule"]
    assert keys["message"].startswith("podTemplate.labels keys must be label keys")
    assert _patterns(values["rule"]) == [LABEL_VALUE]
    assert "self.labels[k]" in values["rule"]
    assert values["message"].startswith("podTemplate.labels values must be label values")


def test_annotation_values_are_free_text() -> None:
    (keys,) = _map_rules("annotations", "podTemplate.annotations", values=False)
    assert _patterns(keys["rule"]) == [LABEL_KEY]
    assert keys["fieldPath"] == ".annotations"


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("app", True),
        ("example.com/team", True),
        ("a.b-c_d", True),
        ("-app", False),
        ("app-", False),
        ("Example.com/app", False),  # a prefix is a lowercase DNS subdomain
        ("a" * 64, False),
        ("/app", False),
    ],
)
def test_the_key_rule_accepts_label_keys_only(key: str, valid: bool) -> None:
    (keys,) = _map_rules("labels", "podTemplate.labels", values=False)
    (pattern,) = _patterns(keys["rule"])
    assert bool(re.fullmatch(pattern, key)) is valid


def _condition(kind: str, reason: str) -> Condition:
    return Condition(type=kind, status="False", reason=reason, lastTransitionTime=T0)


def test_a_status_condition_is_found_by_type() -> None:
    status = AgentSessionStatus(
        conditions=[_condition("PodScheduled", "Pending"), _condition("Ready", "Pending")]
    )
    ready = status.condition("Ready")
    assert ready is not None
    assert ready.type == "Ready"
    assert status.condition("AgentctlReady") is None
    assert AgentSessionStatus().condition("Ready") is None


def test_a_pool_template_holds_the_fields_that_shape_a_sessions_pod_as_the_session_spec_has_them() -> None:
    spec_fields = AgentSessionSpec.model_fields
    assert tuple(PoolTemplate.model_fields) == POD_SHAPE_FIELDS
    for name, field in PoolTemplate.model_fields.items():
        assert (field.annotation, field.description) == (
            spec_fields[name].annotation,
            spec_fields[name].description,
        )
    template = PoolTemplate.model_validate({"workspace": {"size": "1Gi"}, "cwd": "/workspace/src"})
    assert template.session_spec() == AgentSessionSpec.model_validate(
        {"agent": {"type": "demo"}, "workspace": {"size": "1Gi"}, "cwd": "/workspace/src"}
    )
    with pytest.raises(ValidationError):
        PoolTemplate.model_validate({"prompt": "a session's own field"})
    with pytest.raises(ValidationError):
        PoolTemplate.model_validate({"cwd": "relative"})
