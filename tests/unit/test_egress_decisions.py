"""The egress proxy's pure decisions: who calls (phantom, address, pod state), where it may go, what it may spend,
and the price of a call."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agentsession.api.constants import LABEL_SESSION
from agentsession.api.egress import (
    BUDGET_ANNOTATION,
    EGRESS_ALLOW_ANNOTATION,
    PHANTOM_DIGEST_ANNOTATION,
    Budget,
    Usage,
    new_phantom,
    phantom_digest,
)
from agentsession.egress_proxy.directory import Directory
from agentsession.egress_proxy.identity import Caller, Refusal, by_address, by_phantom, settled
from agentsession.egress_proxy.policy import budget_refusal, egress_refusal, is_push, push_refusal
from agentsession.egress_proxy.prices import OTHER, Price, PriceTable, Tokens
from agentsession.egress_proxy.upstream import blocked

NS = "team"


def pod(
    name: str, ip: str | None, phantom: str | None, session: str | None, *, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": NS, "name": name, "labels": {}, "annotations": {}}
    if session:
        meta["labels"][LABEL_SESSION] = session
    if phantom:
        meta["annotations"][PHANTOM_DIGEST_ANNOTATION] = phantom_digest(phantom)
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"podIP": ip} if ip else {}}


def session(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}"},
        "spec": {"agent": {"type": "claude-code", "credentialsSecretRef": {"name": "keys"}}, **spec},
    }


@pytest.fixture
def directory() -> Directory:
    return Directory()


def test_a_phantom_from_its_pods_address_names_the_session(directory: Directory) -> None:
    phantom = new_phantom()
    directory.apply_session("ADDED", session("s1"))
    directory.apply_pod("ADDED", pod("s1-agent", "10.1.0.5", phantom, "s1"))
    caller = by_phantom(directory, phantom, "10.1.0.5")
    assert isinstance(caller, Caller)
    assert caller.session.name == "s1"
    assert caller.session.secret_name == "keys"


def _refused(result: Caller | Refusal) -> tuple[int, str]:
    assert isinstance(result, Refusal), result
    return result.status, result.type


async def test_a_new_pods_first_call_waits_for_its_address_instead_of_being_refused(
    directory: Directory,
) -> None:
    phantom = new_phantom()
    directory.apply_session("ADDED", session("s1"))
    directory.apply_pod("ADDED", pod("s1-agent", None, phantom, "s1"))
    asyncio.get_running_loop().call_later(
        0.2, directory.apply_pod, "MODIFIED", pod("s1-agent", "10.1.0.5", phantom, "s1")
    )
    assert isinstance(await settled(lambda: by_phantom(directory, phantom, "10.1.0.5")), Caller)
    # Another address is decided at once; an address that never becomes a pod's, after the grace only.
    started = time.monotonic()
    assert _refused(await settled(lambda: by_phantom(directory, phantom, "10.1.0.6"))) == (
        403,
        "credential_not_bound",
    )
    assert time.monotonic() - started < 0.1
    started = time.monotonic()
    assert _refused(await settled(lambda: by_address(directory, "10.1.0.9"), grace=0.3)) == (
        403,
        "unknown_caller",
    )
    assert time.monotonic() - started >= 0.3


def test_unknown_and_malformed_phantoms_are_unknown(directory: Directory) -> None:
    assert _refused(by_phantom(directory, new_phantom(), "10.1.0.5")) == (401, "unknown_credential")
    assert _refused(by_phantom(directory, "sk-ant-real-looking", "10.1.0.5")) == (401, "unknown_credential")
    assert _refused(by_phantom(directory, None, "10.1.0.5")) == (401, "unknown_credential")


def test_a_phantom_from_another_address_is_not_bound(directory: Directory) -> None:
    phantom = new_phantom()
    directory.apply_session("ADDED", session("s1"))
    directory.apply_pod("ADDED", pod("s1-agent", "10.1.0.5", phantom, "s1"))
    assert _refused(by_phantom(directory, phantom, "10.1.0.6")) == (403, "credential_not_bound")
    # A pod without an IP yet cannot be called from anywhere.
    other = new_phantom()
    directory.apply_pod("ADDED", pod("s2-agent", None, other, "s1"))
    assert _refused(by_phantom(directory, other, "10.1.0.6")) == (403, "credential_not_bound")


def test_a_terminating_or_deleted_pods_phantom_is_revoked(directory: Directory) -> None:
    phantom = new_phantom()
    directory.apply_session("ADDED", session("s1"))
    live = pod("s1-agent", "10.1.0.5", phantom, "s1")
    directory.apply_pod("ADDED", live)
    directory.apply_pod("MODIFIED", pod("s1-agent", "10.1.0.5", phantom, "s1", deleting=True))
    refusal = by_phantom(directory, phantom, "10.1.0.5")
    assert _refused(refusal) == (403, "credential_not_bound")
    assert isinstance(refusal, Refusal)
    assert "terminating" in refusal.message
    directory.apply_pod("DELETED", live)
    refusal = by_phantom(directory, phantom, "10.1.0.5")
    assert _refused(refusal) == (403, "credential_not_bound")
    assert isinstance(refusal, Refusal)
    assert "revoked" in refusal.message
    # Its address is no longer a session's either.
    assert _refused(by_address(directory, "10.1.0.5")) == (403, "unknown_caller")


def test_an_unclaimed_pool_pod_is_refused(directory: Directory) -> None:
    phantom = new_phantom()
    directory.apply_pod("ADDED", pod("pool-abcde-agent", "10.1.0.9", phantom, None))
    assert _refused(by_phantom(directory, phantom, "10.1.0.9")) == (403, "not_claimed")
    assert _refused(by_address(directory, "10.1.0.9")) == (403, "not_claimed")


def test_a_pod_whose_session_is_gone_is_refused(directory: Directory) -> None:
    phantom = new_phantom()
    directory.apply_pod("ADDED", pod("s1-agent", "10.1.0.5", phantom, "s1"))
    assert _refused(by_phantom(directory, phantom, "10.1.0.5")) == (403, "credential_not_bound")


def test_an_address_shared_with_a_terminating_pod_names_the_live_one(directory: Directory) -> None:
    directory.apply_session("ADDED", session("old"))
    directory.apply_session("ADDED", session("new"))
    directory.apply_pod("ADDED", pod("old-agent", "10.1.0.5", None, "old", deleting=True))
    directory.apply_pod("ADDED", pod("new-agent", "10.1.0.5", None, "new"))
    caller = by_address(directory, "10.1.0.5")
    assert isinstance(caller, Caller)
    assert caller.session.name == "new"


def test_allowlist_layers_ports_and_wildcards(directory: Directory) -> None:
    directory.apply_session(
        "ADDED", session("s1", network={"egress": {"allow": ["pypi.org", "*.pythonhosted.org"]}})
    )
    directory.apply_namespace(
        "ADDED",
        {"metadata": {"name": NS, "annotations": {EGRESS_ALLOW_ANNOTATION: "registry.npmjs.org, bad host"}}},
    )
    info = directory.session(NS, "s1")
    assert info is not None
    notes = directory.namespace_annotations(NS)

    def refusal(host: str, port: int = 443) -> str | None:
        found = egress_refusal(info, host, port, [443], notes, ["github.com"])
        return found.type if found else None

    assert refusal("pypi.org") is None
    assert refusal("files.pythonhosted.org") is None
    assert refusal("pythonhosted.org") == "host_not_allowed"  # a wildcard is for names under the domain
    assert refusal("registry.npmjs.org") is None  # the namespace's
    assert refusal("github.com") is None  # the chart's
    assert refusal("evil.example") == "host_not_allowed"
    assert refusal("pypi.org", 22) == "port_not_allowed"
    denied = egress_refusal(info, "evil.example", 443, [443], notes, [])
    assert denied is not None
    assert "evil.example" in denied.message
    assert "team/s1" in denied.message
    assert "spec.network.egress.allow" in denied.message


def test_git_push_needs_permission(directory: Directory) -> None:
    assert is_push("/org/repo.git/git-receive-pack", {})
    assert is_push("/org/repo.git/info/refs", {"service": "git-receive-pack"})
    assert not is_push("/org/repo.git/info/refs", {"service": "git-upload-pack"})
    assert not is_push("/org/repo.git/git-upload-pack", {})
    directory.apply_session("ADDED", session("reader"))
    directory.apply_session("ADDED", session("writer", network={"git": {"push": True}}))
    reader, writer = directory.session(NS, "reader"), directory.session(NS, "writer")
    assert reader is not None
    assert writer is not None
    refused = push_refusal(reader, "github.com")
    assert refused is not None
    assert refused.type == "push_not_allowed"
    assert "spec.network.git.push" in refused.message
    assert push_refusal(writer, "github.com") is None


def test_budget_layers_and_the_message(directory: Directory) -> None:
    directory.apply_session("ADDED", session("s1", budget={"maxTokens": 100}))
    directory.apply_namespace(
        "ADDED", {"metadata": {"name": NS, "annotations": {BUDGET_ANNOTATION: '{"maxRequests": 3}'}}}
    )
    info = directory.session(NS, "s1")
    assert info is not None
    notes = directory.namespace_annotations(NS)
    chart = Budget(maxCostUSD="1")
    assert budget_refusal(info, Usage(inputTokens=50, requests=2), notes, chart) is None
    spent = budget_refusal(info, Usage(inputTokens=60, outputTokens=40), notes, chart)
    assert spent is not None
    assert spent.type == "budget_exhausted"
    assert spent.status == 403
    assert (
        spent.message == "budget exhausted: 100 tokens reached the budget of 100; raise spec.budget to go on"
    )
    assert budget_refusal(info, Usage(requests=3), notes, chart) is not None
    assert budget_refusal(info, Usage(costUSD="1.5"), notes, chart) is not None


def test_prices_first_matching_pattern_and_decimal_cost(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(
        "- {provider: anthropic, model: 'claude-opus-4*', inputPerMTok: '15', outputPerMTok: '75', cachedPerMTok: '1.5'}\n"
        "- {provider: anthropic, model: 'claude-*', inputPerMTok: '3', outputPerMTok: '15', cachedPerMTok: '0.3'}\n"
        "- {provider: openai, model: 'gpt-5*', inputPerMTok: '1.25', outputPerMTok: '10'}\n"
    )
    table = PriceTable.load(path)
    assert table.label("anthropic", "claude-opus-4-1-20250805") == "claude-opus-4*"
    assert table.label("anthropic", "Claude-Sonnet-4-5") == "claude-*"
    assert table.label("anthropic", "gpt-5") == OTHER
    assert table.label("gemini", "anything at all") == OTHER
    cost = table.cost("anthropic", Tokens(input=1000, output=2000, cached=10_000, model="claude-sonnet-4-5"))
    assert cost == Decimal("0.036")  # 1000*3 + 2000*15 + 10000*0.3 per million
    assert table.cost("openai", Tokens(input=10**6, model="unknown")) == 0
    bad = tmp_path / "bad.json"
    bad.write_text('[{"provider": "nobody", "model": "*", "inputPerMTok": "1", "outputPerMTok": "1"}]')
    with pytest.raises(ValueError, match=r"bad\.json"):
        PriceTable.load(bad)
    assert (
        Price(provider="gemini", model="gemini-*", inputPerMTok="1", outputPerMTok="2").cachedPerMTok == "0"
    )


@pytest.mark.parametrize(
    ("address", "refused"),
    [("127.0.0.1", True), ("169.254.169.254", True), ("::1", True), ("fe80::1", True), ("0.0.0.0", True),
     ("::ffff:127.0.0.1", True), ("fd00:ec2::254", True), ("10.0.0.7", False), ("198.18.0.4", False),
     ("2001:db8::1", False), ("not-an-address", True)],
)  # fmt: skip
def test_addresses_the_proxy_never_connects_to(address: str, refused: bool) -> None:
    assert blocked(address) is refused
