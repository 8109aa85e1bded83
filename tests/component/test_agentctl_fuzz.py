"""Acceptance 5 (fuzz): requests generated from agentctl's own OpenAPI document never get a 5xx, and every
error has the ErrorResponse shape."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.component.conftest import Agentctl
from tests.support.agentctl_signing import instance_of, signed

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def strategy(
    schema: dict[str, Any], components: dict[str, Any], interesting: list[str]
) -> st.SearchStrategy[Any]:
    """A loose generator for a JSON Schema: mostly the right shape, sometimes the wrong type."""
    if "$ref" in schema:
        return strategy(components[schema["$ref"].rsplit("/", 1)[-1]], components, interesting)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([strategy(s, components, interesting) for s in schema[key]])
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: strategy(v, components, interesting) for k, v in props.items() if k in required},
            optional={k: strategy(v, components, interesting) for k, v in props.items() if k not in required},
        )
    if kind == "string":
        return st.one_of(st.text(max_size=30), st.sampled_from(interesting))
    if kind == "integer":
        return st.integers(min_value=-(2**70), max_value=2**70)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(strategy(schema.get("items", {}), components, interesting), max_size=3)
    return JSON_VALUES


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    ops = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            ops.append((method.upper(), path, op))
    return ops


def fuzz(base: str, token: str, doc: dict[str, Any], workdir: str) -> Counter[int]:
    components = doc["components"]["schemas"]
    interesting = ["", "/", workdir, "relative/dir", "..", "ask", "code", "allow", "reject", "\x00", "demo-0"]
    statuses: Counter[int] = Counter()

    def request_for(op: tuple[str, str, dict[str, Any]]) -> st.SearchStrategy[tuple[str, str, bytes | None]]:
        method, path, spec = op
        query = st.just("")
        names = [p["name"] for p in spec.get("parameters", []) if p["in"] == "query"]
        if names:
            query = st.lists(
                st.tuples(
                    st.sampled_from(names), st.one_of(st.integers(-5, 10**12).map(str), st.text(max_size=8))
                ),
                max_size=2,
            ).map(lambda pairs: "?" + urllib.parse.urlencode(pairs) if pairs else "")
        body: st.SearchStrategy[bytes | None] = st.none()
        if "requestBody" in spec:
            schema = spec["requestBody"]["content"]["application/json"]["schema"]
            body = st.one_of(
                strategy(schema, components, interesting).map(lambda v: json.dumps(v).encode()),
                JSON_VALUES.map(lambda v: json.dumps(v).encode()),
                st.binary(max_size=40),
            )
        return st.tuples(st.just(method), query.map(lambda q: path + q), body)

    instance = instance_of(base)

    @settings(
        max_examples=250,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.sampled_from(operations(doc)).flatmap(request_for))
    def run(req: tuple[str, str, bytes | None]) -> None:
        method, path, body = req
        r = urllib.request.Request(
            base + path, data=body, method=method, headers=signed(token, instance, method, path)
        )
        try:
            with urllib.request.urlopen(r, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        statuses[status] += 1
        # A 5xx the operation documents is its answer (the agent's readiness before the agent answers), not a crash.
        documented = str(status) in doc["paths"][path.partition("?")[0]][method.lower()]["responses"]
        assert status < 500 or documented, f"{method} {path} body={body!r} -> {status} {raw[:300]!r}"
        if status >= 400:
            error = json.loads(raw)
            assert error["success"] is False
            assert error["error"]
            assert error["message"]

    run()
    return statuses


async def test_openapi_driven_fuzz_finds_no_5xx(spawn: Any) -> None:
    ctl: Agentctl = await spawn("--permission-timeout", "0.5", "--shell", "/bin/sh")
    await ctl.post("/api/v1/start", {})
    doc = await ctl.ok("GET", "/api/v1/openapi.json")
    assert doc["openapi"].startswith("3.1")
    assert len(doc["paths"]) >= 20
    statuses = await asyncio.to_thread(fuzz, ctl.base, ctl.token, doc, str(ctl.workdir))
    assert statuses.total() >= 250
    # The generator reaches both the handlers' success paths and their validation.
    assert statuses[200] > 10, statuses
    assert statuses[422] > 10, statuses
    assert statuses[400] > 0, statuses
    async with ctl.http.get(ctl.base + "/health") as resp:
        assert resp.status == 200
