"""Who a client is (TokenReview) and what it may do (SubjectAccessReview), cached with a bound.

Tokens come from `Authorization: Bearer`, or, for browsers that cannot set headers on a WebSocket, from a
`bearer.<token>` subprotocol entry; never from the URL, which proxies and access logs keep.

What a flood of bad tokens costs is bounded: a token that cannot be one (too long, or characters no bearer token
has) is refused without a review; each client address may fail only so often (`FailureLimiter`); rejected tokens
are remembered in a cache of their own, so they never push out accepted ones; and only so many TokenReviews are in
flight at once.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from aiohttp import web

from agentsession.api.constants import GROUP, PLURAL
from agentsession.gateway import metrics
from agentsession.kube.client import Kube
from agentsession.kube.errors import KubeError

log = logging.getLogger(__name__)

SUBPROTOCOL_PREFIX = "bearer."
# Service-account tokens are about 1 KiB and OIDC ID tokens a few; a longer "token" is a flood, not a credential.
MAX_TOKEN_LENGTH = 8192
# RFC 6750's b64token: what JWTs, service-account, bootstrap and OIDC tokens are made of.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# Rejected tokens are remembered this long: a client retrying a bad token costs one review per period.
NEGATIVE_TTL = 10.0
# How long a review waits for one of the `max_token_reviews` slots before the client is told to retry.
REVIEW_SLOT_WAIT = 10.0
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Identity:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)
    anonymous_dev: bool = False

    @property
    def key(self) -> tuple[Any, ...]:
        """Everything an authorizer may decide on: two tokens of one user with different `extra` (a scoped token,
        an impersonation) are different subjects."""
        extra = tuple(sorted((name, tuple(values)) for name, values in self.extra.items()))
        return self.username, self.uid, tuple(sorted(self.groups)), extra


DEV_IDENTITY = Identity("insecure-dev-mode", anonymous_dev=True)


class AuthError(Exception):
    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class TTLCache(Generic[K, V]):
    """LRU with a time-to-live; bounded so a flood of distinct tokens cannot grow memory."""

    def __init__(self, ttl: float, max_entries: int) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if expires < time.monotonic():
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl: float | None = None) -> None:
        self._data[key] = (time.monotonic() + (self.ttl if ttl is None else ttl), value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def discard(self, key: K) -> None:
        self._data.pop(key, None)

    def __len__(self) -> int:
        return len(self._data)


class FailureLimiter:
    """A token bucket per client address: each failed authentication, and each review that may fail, takes one;
    they come back at `rate` per second up to `burst`. The addresses followed are bounded (oldest dropped)."""

    def __init__(self, rate: float, burst: int, max_peers: int = 10_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_peers = max_peers
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # peer → (tokens, as of)

    def _level(self, peer: str, now: float) -> float:
        tokens, since = self._buckets.get(peer, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - since) * self.rate)

    def take(self, peer: str) -> float | None:
        """None when the peer had a token left (now taken), else the seconds until it has one."""
        now = time.monotonic()
        tokens = self._level(peer, now)
        if tokens < 1.0:
            return (1.0 - tokens) / self.rate
        self._buckets[peer] = (tokens - 1.0, now)
        self._buckets.move_to_end(peer)
        while len(self._buckets) > self.max_peers:
            self._buckets.popitem(last=False)
        return None

    def give_back(self, peer: str) -> None:
        """A review that accepted the token costs the peer nothing."""
        now = time.monotonic()
        if peer in self._buckets:
            self._buckets[peer] = (min(float(self.burst), self._level(peer, now) + 1.0), now)


def extract_token(request: web.Request) -> tuple[str | None, str | None]:
    """(token, the subprotocol entry that carried it, to leave out of the negotiated protocol)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), None
    for proto in (p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")):
        if proto.startswith(SUBPROTOCOL_PREFIX) and len(proto) > len(SUBPROTOCOL_PREFIX):
            return proto[len(SUBPROTOCOL_PREFIX) :], proto
    return None, None


def token_shaped(token: str) -> bool:
    return len(token) <= MAX_TOKEN_LENGTH and TOKEN_SHAPE.fullmatch(token) is not None


def token_expiry(token: str) -> float | None:
    """The `exp` claim (seconds since the epoch) of a JWT, read without checking its signature; None for a token
    that is not a JWT or has no expiry. The API server has checked the token: this only tells when it ends."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, RecursionError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


AccessKey = tuple[tuple[Any, ...], str, str, str]  # (identity key, namespace, verb, name)


class Authenticator:
    def __init__(
        self,
        kube: Kube,
        *,
        audiences: list[str] | None = None,
        ttl: float = 60.0,
        max_entries: int = 10_000,
        negative_entries: int = 1024,
        max_reviews: int = 16,
        failures: FailureLimiter | None = None,
    ) -> None:
        self._kube = kube
        self._audiences = audiences or []
        self._ttl = ttl
        self._tokens: TTLCache[str, Identity] = TTLCache(ttl, max_entries)
        self._rejected: TTLCache[str, bool] = TTLCache(NEGATIVE_TTL, negative_entries)
        self._access: TTLCache[AccessKey, bool] = TTLCache(ttl, max_entries)
        self._review_slots = asyncio.Semaphore(max_reviews)
        self._failures = failures or FailureLimiter(rate=1.0, burst=10)

    async def authenticate(
        self, token: str | None, peer: str | None = None, *, fresh: bool = False
    ) -> Identity:
        """The token's identity. `peer` (the client's address) pays for failures; without one (an open
        connection's re-check) nothing is limited. `fresh` asks the API server again whatever is cached."""
        if not token:
            metrics.AUTH_DECISIONS.labels("no_token").inc()
            raise AuthError(
                401,
                "unauthorized",
                "a Kubernetes bearer token is required: 'Authorization: Bearer <token>' or the WebSocket "
                "subprotocol 'bearer.<token>'",
            )
        if not token_shaped(token):
            self._charge(peer)
            metrics.AUTH_DECISIONS.labels("malformed_token").inc()
            raise AuthError(
                401,
                "unauthorized",
                f"that is not a bearer token: at most {MAX_TOKEN_LENGTH} characters of A-Z a-z 0-9 - . _ ~ + / =",
            )
        digest = _digest(token)
        known = None if fresh else self._tokens.get(digest)
        if known is not None:
            metrics.AUTH_DECISIONS.labels("authenticated").inc()
            return known
        if not fresh and self._rejected.get(digest):
            self._charge(peer)
            raise self._rejection()
        # The review is paid for in advance: a burst of distinct bad tokens from one address cannot all be reviewed
        # before the first of them has failed.
        self._charge(peer)
        try:
            identity = await self._review(token)
        except AuthError:
            self._give_back(peer)  # the API server's trouble, not the client's
            raise
        if identity is None:
            self._tokens.discard(digest)
            self._rejected.put(digest, True)
            raise self._rejection()
        self._give_back(peer)
        ttl = self._ttl
        expires = token_expiry(token)
        if expires is not None:
            ttl = min(ttl, expires - time.time())
        self._tokens.put(digest, identity, ttl)
        metrics.AUTH_DECISIONS.labels("authenticated").inc()
        return identity

    def _charge(self, peer: str | None) -> None:
        if peer is None:
            return
        wait = self._failures.take(peer)
        if wait is not None:
            metrics.AUTH_DECISIONS.labels("throttled").inc()
            raise AuthError(
                429,
                "too_many_requests",
                f"too many failed authentications from your address; retry in {wait:.0f} s with a valid token",
                retry_after=wait,
            )

    def _give_back(self, peer: str | None) -> None:
        if peer is not None:
            self._failures.give_back(peer)

    @staticmethod
    def _rejection() -> AuthError:
        metrics.AUTH_DECISIONS.labels("bad_token").inc()
        return AuthError(401, "unauthorized", "the bearer token was rejected by the Kubernetes API server")

    async def _review(self, token: str) -> Identity | None:
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        try:
            async with asyncio.timeout(REVIEW_SLOT_WAIT):
                await self._review_slots.acquire()
        except TimeoutError:
            raise AuthError(
                503, "unavailable", "too many tokens are being checked at once; retry shortly"
            ) from None
        try:
            result = await self._kube.create(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
            )
        except KubeError as exc:
            log.error("TokenReview failed: %s", exc)
            raise AuthError(503, "unavailable", "cannot verify tokens right now; retry later") from exc
        finally:
            self._review_slots.release()
        status = result.get("status") or {}
        if not status.get("authenticated"):
            return None
        # An authenticator that ignores audiences answers without any: the token is then one for the API server
        # itself, which this gateway must not take when it asked for its own audience.
        if self._audiences and not set(status.get("audiences") or ()) & set(self._audiences):
            log.info(
                "a token valid for other audiences (%s) was refused", status.get("audiences") or "the API's"
            )
            return None
        user = status.get("user") or {}
        return Identity(
            username=user.get("username", ""),
            uid=user.get("uid", ""),
            groups=tuple(user.get("groups") or ()),
            extra={k: list(v) for k, v in (user.get("extra") or {}).items()},
        )

    async def allowed(self, identity: Identity, namespace: str, verb: str, name: str = "") -> bool:
        """Whether `identity` may `verb` agentsessions in `namespace` ("": all), or the one called `name`."""
        if identity.anonymous_dev:
            return True
        return bool(await self.review_access(identity, namespace, verb, name))

    async def review_access(
        self, identity: Identity, namespace: str, verb: str, name: str = "", *, fresh: bool = False
    ) -> bool | None:
        """The SubjectAccessReview's answer (cached unless `fresh`); None when the API server could not answer."""
        key: AccessKey = (identity.key, namespace, verb, name)
        cached = None if fresh else self._access.get(key)
        if cached is not None:
            return cached
        attributes = {"namespace": namespace, "verb": verb, "group": GROUP, "resource": PLURAL}
        if name:
            attributes["name"] = name
        spec: dict[str, Any] = {
            "user": identity.username,
            "groups": list(identity.groups),
            "resourceAttributes": attributes,
        }
        if identity.uid:
            spec["uid"] = identity.uid
        if identity.extra:
            spec["extra"] = identity.extra
        try:
            result = await self._kube.create(
                {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
            )
        except KubeError as exc:
            log.error("SubjectAccessReview failed: %s", exc)
            return None
        decision = bool((result.get("status") or {}).get("allowed"))
        self._access.put(key, decision)
        metrics.AUTH_DECISIONS.labels(f"{verb}_{'allowed' if decision else 'denied'}").inc()
        return decision
