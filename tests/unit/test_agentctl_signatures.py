"""agentctl's request signatures: what a header must carry, and each way agentctl refuses one."""

from __future__ import annotations

import pytest

from agentsession.agentctl.authentication import Verifier
from agentsession.agentctl.errors import ApiError
from agentsession.contract.auth import (
    SCHEME,
    WINDOW_SECONDS,
    BadHeader,
    TokenDeriver,
    authorization,
    key_id,
    parse,
)

TOKEN = "unit-test-token"
NOW = 1_900_000_000.0
STATUS = ("GET", "/api/v1/status")


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def verifier(clock: Clock) -> Verifier:
    return Verifier(TOKEN, clock=clock, max_nonces=4)


def signed(verifier: Verifier, method: str = "GET", target: str = "/api/v1/status", **kw: object) -> str:
    return authorization(TOKEN, verifier.instance, method, target, now=NOW, **kw)  # type: ignore[arg-type]


def refusal(
    verifier: Verifier, header: str | None, method: str = "GET", target: str = "/api/v1/status"
) -> str:
    with pytest.raises(ApiError) as refused:
        verifier.check(header, method, target)
    assert refused.value.status == 401
    return refused.value.message


def test_a_signed_request_passes_once_and_its_replay_is_refused(verifier: Verifier) -> None:
    header = signed(verifier)
    verifier.check(header, *STATUS)
    assert "used before" in refusal(verifier, header)


def test_the_header_never_holds_the_token(verifier: Verifier) -> None:
    header = signed(verifier)
    assert header.startswith(f"{SCHEME} v1 ")
    assert TOKEN not in header
    assert parse(header).key_id == key_id(TOKEN)


@pytest.mark.parametrize(
    ("method", "target"),
    [("POST", "/api/v1/status"), ("GET", "/api/v1/history"), ("GET", "/api/v1/status?after=1")],
    ids=["other-method", "other-path", "other-query"],
)
def test_a_signature_covers_the_method_path_and_query(verifier: Verifier, method: str, target: str) -> None:
    assert refusal(verifier, signed(verifier), method, target) == "invalid signature"


def test_a_signature_for_another_instance_is_refused(verifier: Verifier, clock: Clock) -> None:
    """What a process on agentctl's port captured while agentctl was down names an instance that never was."""
    restarted = Verifier(TOKEN, clock=clock)
    assert restarted.instance != verifier.instance
    assert "another agentctl instance" in refusal(restarted, signed(verifier))


def test_another_token_is_named_as_such(verifier: Verifier) -> None:
    header = authorization("another-token", verifier.instance, *STATUS, now=NOW)
    assert refusal(verifier, header) == "signed with a token other than this agentctl's"


def test_a_forged_signature_with_the_right_key_id_is_refused(verifier: Verifier) -> None:
    header = signed(verifier)
    forged = header[: -len(parse(header).signature)] + "0" * 64
    assert refusal(verifier, forged) == "invalid signature"


@pytest.mark.parametrize("skew", [WINDOW_SECONDS + 1, -(WINDOW_SECONDS + 1)])
def test_a_signature_outside_the_window_is_refused(verifier: Verifier, clock: Clock, skew: int) -> None:
    clock.now = NOW - skew
    assert "outside ±60 s" in refusal(verifier, signed(verifier))


def test_the_window_edges_are_inside(verifier: Verifier, clock: Clock) -> None:
    for n, skew in enumerate((WINDOW_SECONDS, -WINDOW_SECONDS)):
        clock.now = NOW - skew
        verifier.check(signed(verifier, nonce=f"{n:032x}"), *STATUS)


@pytest.mark.parametrize(
    ("header", "needle"),
    [
        (None, "missing"),
        ("", "missing"),
        (f"Bearer {TOKEN}", "AgentctlSignature scheme"),
        ("AgentctlSignature v9 i=1", "version"),
        ("AgentctlSignature v1 i=1,k=2", "field k is malformed"),
        (
            "AgentctlSignature v1 i=zz,k=0000000000000000,t=1,n=00000000000000000000,s=" + "0" * 64,
            "malformed",
        ),
        ("AgentctlSignature v1 i=1,i=1,k=0,t=1,n=0,s=0", "each once"),
        ("AgentctlSignature v1 i=1,k=0000000000000000,t=1,n=0000000000000000", "lacks s"),
    ],
)
def test_malformed_headers_say_what_is_wrong(verifier: Verifier, header: str | None, needle: str) -> None:
    assert needle in refusal(verifier, header)


def test_the_nonce_memory_is_bounded_and_forgets_what_left_the_window(
    verifier: Verifier, clock: Clock
) -> None:
    for n in range(4):
        verifier.check(signed(verifier, nonce=f"{n:032x}"), *STATUS)
    with pytest.raises(ApiError) as full:
        verifier.check(signed(verifier, nonce=f"{9:032x}"), *STATUS)
    assert (full.value.status, full.value.code) == (429, "too_many_requests")
    assert verifier.remembered == 4
    # Past the window, the old nonces are forgotten (their time alone refuses them now) and new requests pass.
    clock.now = NOW + WINDOW_SECONDS + 1
    fresh = authorization(TOKEN, verifier.instance, *STATUS, now=clock.now, nonce=f"{10:032x}")
    verifier.check(fresh, *STATUS)
    assert verifier.remembered == 1
    assert "outside" in refusal(verifier, signed(verifier, nonce=f"{0:032x}"))


def test_a_refused_request_takes_no_place_in_the_memory(verifier: Verifier) -> None:
    for n in range(10):
        header = authorization("another-token", verifier.instance, *STATUS, now=NOW, nonce=f"{n:032x}")
        refusal(verifier, header)
    assert verifier.remembered == 0


def test_parse_refuses_what_authorization_never_writes() -> None:
    with pytest.raises(BadHeader):
        parse("AgentctlSignature v1 i=1,k=0000000000000000,t=1,n=0000000000000000,s=" + "0" * 64 + ",x=1")


# ---------------------------------------------------------------- tokens derived from the release key


def test_tokens_differ_by_namespace_stem_and_key() -> None:
    derive = TokenDeriver(b"k" * 32)
    token = derive("team-a", "alpha")
    assert len(token) == 43  # 256 bits, URL-safe base64 without padding
    assert derive("team-a", "alpha") == token
    others = {
        derive("team-b", "alpha"),
        derive("team-a", "alpha2"),
        TokenDeriver(b"j" * 32)("team-a", "alpha"),
    }
    assert token not in others
    assert len(others) == 3
    # However the two are split, each pair has its own token.
    assert derive("team", "a\nb") != derive("team\na", "b")
