"""The gateway's authentication pieces on their own: which origins and Host names pass, the per-address failure
budget, what a token may look like and when it expires, the review caches and the bound on reviews in flight."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from agentsession.gateway import auth as auth_module
from agentsession.gateway.auth import (
    Authenticator,
    AuthError,
    FailureLimiter,
    Identity,
    token_expiry,
    token_shaped,
)
from agentsession.gateway.config import GatewayConfig, parse_args
from agentsession.gateway.origin import loopback_host, normalize_origin, origin_allowed

ALLOWED = frozenset({"https://console.example"})


@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        (None, "gw.example", True),  # not a browser
        ("https://gw.example", "gw.example", True),  # TLS in front: no port in Host
        ("https://gw.example", "gw.example:443", True),
        ("https://GW.example:443/", "gw.example", True),
        ("http://127.0.0.1:8090", "127.0.0.1:8090", True),
        ("http://[::1]:8090", "[::1]:8090", True),
        ("https://console.example", "gw.example", True),  # listed
        ("https://console.example:8443", "gw.example", False),
        ("https://evil.example", "gw.example", False),
        ("http://evil.example", "127.0.0.1:8090", False),
        ("http://gw.example", "gw.example:8080", False),  # another port is another origin
        ("http://gw.example:8080", "gw.example", False),
        ("null", "gw.example", False),  # sandboxed frames, file:// pages
        ("file://", "gw.example", False),
        ("https://gw.example", None, False),
        ("https://gw.example", "gw.example/path", False),
        ("https://gw.example", "user@gw.example", False),
    ],
)
def test_only_the_gateways_own_origin_and_listed_ones_open_ws(
    origin: str | None, host: str | None, allowed: bool
) -> None:
    assert origin_allowed(origin, host, ALLOWED) is allowed


def test_listed_origins_are_compared_normalized() -> None:
    assert normalize_origin("HTTPS://Console.Example:443") == "https://console.example"
    assert normalize_origin("http://console.example:8080/") == "http://console.example:8080"
    assert normalize_origin("https://console.example/path") is None
    assert normalize_origin("null") is None
    with pytest.raises(ValueError, match=r"'https://console\.example/app' is not an origin"):
        GatewayConfig(allowed_origins=["https://console.example/app"])


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1:8090", True), ("127.3.4.5", True), ("[::1]:80", True), ("localhost:8090", True),
     ("LOCALHOST", True), ("evil.example:8090", False), ("localhost.evil.example", False),
     ("127.0.0.1.nip.io", False), ("10.0.0.1", False), ("", False), (None, False)],
)  # fmt: skip
def test_dev_mode_answers_loopback_host_names_only(host: str | None, loopback: bool) -> None:
    assert loopback_host(host) is loopback


def test_dev_mode_listens_on_loopback_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--insecure-dev-mode"]).host == "127.0.0.1"
    assert parse_args(["--insecure-dev-mode", "--host", "::1"]).host == "::1"
    assert parse_args([]).host == "0.0.0.0"
    with pytest.raises(SystemExit):
        parse_args(["--insecure-dev-mode", "--host", "0.0.0.0"])
    assert "insecure_dev_mode listens on loopback only, not on 0.0.0.0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="loopback only"):
        GatewayConfig(insecure_dev_mode=True, host="10.0.0.1")


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(auth_module.time, "monotonic", lambda: self.now)


def test_each_address_may_fail_a_burst_then_at_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    limiter = FailureLimiter(rate=2.0, burst=3)
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") is None, "another address has its own budget"
    clock.now += 0.5
    assert limiter.take("a") is None
    assert limiter.take("a") is not None
    limiter.give_back("a")  # a review that accepted the token
    assert limiter.take("a") is None
    clock.now += 60
    assert [limiter.take("a") for _ in range(4)].count(None) == 3, "refills to the burst, not beyond"


def test_the_addresses_followed_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    Clock(monkeypatch)
    limiter = FailureLimiter(rate=1.0, burst=1, max_peers=10)
    for peer in range(1000):
        limiter.take(f"10.0.{peer // 256}.{peer % 256}")
    assert len(limiter._buckets) == 10


def jwt(claims: dict[str, Any]) -> str:
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return ".".join((part(b'{"alg":"RS256"}'), part(json.dumps(claims).encode()), part(b"signature")))


def test_a_tokens_expiry_is_read_from_a_jwt_only() -> None:
    assert token_expiry(jwt({"exp": 1_900_000_000, "sub": "x"})) == 1_900_000_000
    assert token_expiry(jwt({"sub": "x"})) is None
    assert token_expiry(jwt({"exp": True})) is None
    assert token_expiry(jwt({"exp": "soon"})) is None
    assert token_expiry("abcdef.0123456789abcdef") is None  # a bootstrap token
    assert token_expiry("a.!!!.c") is None
    assert token_expiry("a." + base64.urlsafe_b64encode(b"[" * 5000).decode() + ".c") is None


@pytest.mark.parametrize(
    ("token", "shaped"),
    [(jwt({"exp": 1}), True), ("abcdef.0123456789abcdef", True), ("dG9rZW4=", True), ("a" * 8192, True),
     ("a" * 8193, False), ("has space", False), ('quote"', False), ("<script>", False), ("", False),
     ("tab\t", False), ("ünïcode", False)],
)  # fmt: skip
def test_what_a_bearer_token_may_look_like(token: str, shaped: bool) -> None:
    assert token_shaped(token) is shaped


def test_a_scoped_identity_is_another_subject() -> None:
    unscoped = Identity("alice", "u1", ("team",))
    scoped = Identity("alice", "u1", ("team",), {"scopes": ["view"]})
    assert unscoped.key != scoped.key
    assert Identity("alice", "u2").key != Identity("alice", "u1").key
    assert Identity("a", groups=("x", "y")).key == Identity("a", groups=("y", "x")).key


class ReviewingKube:
    """Answers TokenReviews (a token is good when it starts with "good") and SubjectAccessReviews (allowed when
    the user's extra is empty), optionally holding every review until released; counts what it was asked."""

    def __init__(self, hold: bool = False) -> None:
        self.reviews: list[dict[str, Any]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.reviews.append(manifest)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        spec = manifest["spec"]
        if manifest["kind"] == "TokenReview":
            good = spec["token"].startswith("good")
            user = {
                "username": spec["token"],
                "extra": {"scopes": ["view"]} if "scoped" in spec["token"] else {},
            }
            return {"status": {"authenticated": good, "user": user, "audiences": spec.get("audiences", [])}}
        return {"status": {"allowed": not spec.get("extra")}}


def authenticator(kube: ReviewingKube, **kw: Any) -> Authenticator:
    return Authenticator(kube, **kw)  # type: ignore[arg-type]


async def test_reviews_in_flight_are_bounded() -> None:
    kube = ReviewingKube(hold=True)
    auth = authenticator(kube, max_reviews=4)
    checks = [asyncio.create_task(auth.authenticate(f"good{i}", f"10.0.0.{i}")) for i in range(40)]
    for _ in range(50):  # every check gets far enough to wait for its slot or its answer
        await asyncio.sleep(0)
    assert (kube.in_flight, kube.most_in_flight) == (4, 4)
    kube.release.set()
    identities = await asyncio.gather(*checks)
    assert [i.username for i in identities] == [f"good{i}" for i in range(40)]
    assert kube.most_in_flight == 4


async def test_rejected_tokens_never_push_out_accepted_ones() -> None:
    kube = ReviewingKube()
    auth = authenticator(kube, max_entries=2, negative_entries=8)
    await auth.authenticate("good-alice", "10.0.0.1")
    for i in range(100):
        with pytest.raises(AuthError):
            await auth.authenticate(f"junk{i}", f"10.1.{i}.1")
    asked = len(kube.reviews)
    assert (await auth.authenticate("good-alice", "10.0.0.1")).username == "good-alice"
    assert len(kube.reviews) == asked, "the accepted token was reviewed again"
    # The rejected ones are remembered in a small cache of their own: the oldest are gone, the newest kept.
    with pytest.raises(AuthError):
        await auth.authenticate("junk99", "10.2.0.1")
    assert len(kube.reviews) == asked
    with pytest.raises(AuthError):
        await auth.authenticate("junk0", "10.2.0.2")
    assert len(kube.reviews) == asked + 1


async def test_malformed_tokens_and_an_empty_budget_cost_no_review() -> None:
    kube = ReviewingKube()
    auth = authenticator(kube, failures=FailureLimiter(rate=0.001, burst=3))
    for bad in ("has space", "x" * 9000, "<script>"):
        with pytest.raises(AuthError) as refused:
            await auth.authenticate(bad, "10.0.0.1")
        assert refused.value.status == 401
    assert kube.reviews == []
    with pytest.raises(AuthError) as throttled:
        await auth.authenticate("junk", "10.0.0.1")
    assert (throttled.value.status, throttled.value.code) == (429, "too_many_requests")
    assert throttled.value.retry_after is not None
    assert kube.reviews == []
    # A re-check of an open connection (no address) is never throttled, and asks again whatever is cached.
    await auth.authenticate("good-bob", "10.0.0.2")
    assert (await auth.authenticate("good-bob", fresh=True)).username == "good-bob"
    assert len(kube.reviews) == 2


async def test_an_accepted_token_is_cached_no_longer_than_it_lives(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = ReviewingKube()
    auth = authenticator(kube, ttl=60)
    token = "good" + jwt({"exp": 1_000_000_005})[4:]
    monkeypatch.setattr(auth_module.time, "time", lambda: 1_000_000_000.0)
    clock = Clock(monkeypatch)
    await auth.authenticate(token, "10.0.0.1")
    clock.now += 4
    await auth.authenticate(token, "10.0.0.1")
    assert len(kube.reviews) == 1
    clock.now += 2
    await auth.authenticate(token, "10.0.0.1")
    assert len(kube.reviews) == 2


async def test_audiences_must_come_back_from_the_review() -> None:
    """An authenticator that ignores audiences answers without any: such a token is for the API server."""

    class DeafKube(ReviewingKube):
        async def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
            answer = await super().create(manifest)
            answer["status"].pop("audiences", None)
            return answer

    with pytest.raises(AuthError):
        await authenticator(DeafKube(), audiences=["agentsession-gateway"]).authenticate("good", "10.0.0.1")
    kube = ReviewingKube()
    await authenticator(kube, audiences=["agentsession-gateway"]).authenticate("good", "10.0.0.1")
    assert kube.reviews[0]["spec"]["audiences"] == ["agentsession-gateway"]


async def test_access_answers_are_kept_per_subject_and_per_session() -> None:
    kube = ReviewingKube()
    auth = authenticator(kube)
    unscoped = await auth.authenticate("good-alice", "10.0.0.1")
    scoped = Identity(unscoped.username, extra={"scopes": ["view"]})
    assert await auth.allowed(unscoped, "team", "update", "demo") is True
    assert await auth.allowed(scoped, "team", "update", "demo") is False, "the unscoped answer was reused"
    sars = [r["spec"] for r in kube.reviews if r["kind"] == "SubjectAccessReview"]
    assert [s["resourceAttributes"].get("name") for s in sars] == ["demo", "demo"]
    assert sars[1]["extra"] == {"scopes": ["view"]}
    await auth.allowed(unscoped, "team", "update", "other")
    assert len(kube.reviews) == 4, "another session is another question"


class GuardedConnection:
    """What the guard sees of a connection: its identity, the namespaces it sees, and how it is ended."""

    def __init__(self, namespaces: list[str]) -> None:
        self.identity = Identity("bob", "uid-bob")
        self.closed = False
        self.ended: tuple[str, str, int] | None = None
        self._namespaces = namespaces

    def namespaces_seen(self) -> list[str]:
        return self._namespaces

    def shut(self, failure: Any, code: int, reason: str) -> None:
        self.closed = True
        self.ended = (failure.code, failure.message, code)


class ScriptedAuth:
    """Answers the guard's re-checks from a script: one token answer (an Identity or an AuthError) per round."""

    def __init__(self, rounds: list[Identity | AuthError], access: bool | None = True) -> None:
        self.rounds = rounds
        self.access = access
        self.asked: list[tuple[str, str, str]] = []

    async def authenticate(self, token: str, peer: str | None = None, *, fresh: bool = False) -> Identity:
        assert fresh, "a re-check must ask the API server, not the cache"
        answer = self.rounds.pop(0)
        if isinstance(answer, AuthError):
            raise answer
        return answer

    async def review_access(self, identity: Identity, namespace: str, verb: str, name: str = "", *,
                            fresh: bool = False) -> bool | None:  # fmt: skip
        assert fresh
        self.asked.append((namespace, verb, name))
        return self.access


async def run_guard(conn: GuardedConnection, auth: ScriptedAuth, token: str, interval: float,
                    shells: list[tuple[str, str]] | None = None) -> None:  # fmt: skip
    from agentsession.gateway.access_guard import guard

    await asyncio.wait_for(guard(conn, auth, token, interval, lambda: shells or []), 10)  # type: ignore[arg-type]


async def test_a_connection_outlives_an_api_server_that_cannot_answer_but_not_a_refusal() -> None:
    from agentsession.gateway.connection import CLOSE_UNAUTHORIZED

    conn = GuardedConnection(["team"])
    bob = conn.identity
    unavailable = AuthError(503, "unavailable", "cannot verify tokens right now; retry later")
    refused = AuthError(401, "unauthorized", "rejected")
    auth = ScriptedAuth([bob, unavailable, bob, refused])
    await run_guard(conn, auth, "opaque-token", 0.01)
    assert auth.rounds == [], "the connection did not outlive the unanswered check"
    assert conn.ended is not None
    assert conn.ended[0] == "unauthorized"
    assert conn.ended[2] == CLOSE_UNAUTHORIZED


async def test_access_is_asked_again_for_what_the_connection_receives() -> None:
    from agentsession.gateway.connection import CLOSE_FORBIDDEN

    conn = GuardedConnection(["team", "ops"])
    auth = ScriptedAuth([conn.identity], access=False)
    await run_guard(conn, auth, "opaque-token", 0.01, shells=[("team", "ready")])
    assert auth.asked == [("team", "get", "")], "the first refusal ends it"
    assert conn.ended == ("forbidden", "you may no longer get agentsessions in namespace team; connect again to "
                          "see what you may", CLOSE_FORBIDDEN)  # fmt: skip
    conn = GuardedConnection(["team"])
    auth = ScriptedAuth([conn.identity, conn.identity], access=None)  # the API server cannot answer: kept
    auth.rounds.append(Identity("mallory"))
    await run_guard(conn, auth, "opaque-token", 0.01, shells=[("team", "ready")])
    assert auth.asked == [("team", "get", ""), ("team", "update", "ready")] * 2
    assert conn.ended is not None
    assert conn.ended[1] == "your token now stands for another user; connect again"


async def test_a_connection_ends_at_its_tokens_expiry_whatever_the_interval() -> None:
    import time

    conn = GuardedConnection([])
    expires = time.time() + 0.5
    await run_guard(conn, ScriptedAuth([]), jwt({"exp": expires}), interval=3600)
    assert time.time() >= expires
    assert conn.ended is not None
    assert conn.ended[1] == "your token expired; connect again with a new one"
