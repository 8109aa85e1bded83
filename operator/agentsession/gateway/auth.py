"""Who a client is (TokenReview) and what it may do per namespace (SubjectAccessReview), cached with a bound.

Tokens come from `Authorization: Bearer`, or, for browsers that cannot set headers on a WebSocket, from a
`bearer.<token>` subprotocol entry or an `access_token` query parameter.
"""

from __future__ import annotations

import hashlib
import logging
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
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Identity:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)
    anonymous_dev: bool = False


DEV_IDENTITY = Identity("insecure-dev-mode", anonymous_dev=True)


class AuthError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


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

    def __len__(self) -> int:
        return len(self._data)


def extract_token(request: web.Request) -> tuple[str | None, str | None]:
    """(token, the subprotocol entry that carried it, to leave out of the negotiated protocol)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), None
    for proto in (p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")):
        if proto.startswith(SUBPROTOCOL_PREFIX) and len(proto) > len(SUBPROTOCOL_PREFIX):
            return proto[len(SUBPROTOCOL_PREFIX) :], proto
    query = request.query.get("access_token")
    if query:
        return query, None
    return None, None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    def __init__(
        self,
        kube: Kube,
        *,
        audiences: list[str] | None = None,
        ttl: float = 60.0,
        negative_ttl: float = 10.0,
        max_entries: int = 10_000,
    ) -> None:
        self._kube = kube
        self._audiences = audiences or []
        self._negative_ttl = negative_ttl
        # False marks a token the API server rejected recently.
        self._tokens: TTLCache[str, Identity | bool] = TTLCache(ttl, max_entries)
        self._access: TTLCache[tuple[Identity, str, str], bool] = TTLCache(ttl, max_entries)

    async def authenticate(self, token: str | None) -> Identity:
        if not token:
            metrics.AUTH_DECISIONS.labels("no_token").inc()
            raise AuthError(
                401,
                "unauthorized",
                "a Kubernetes bearer token is required: 'Authorization: Bearer <token>', "
                "subprotocol 'bearer.<token>' or ?access_token=",
            )
        digest = _digest(token)
        cached = self._tokens.get(digest)
        if cached is None:
            reviewed = await self._review(token)
            cached = reviewed if reviewed is not None else False
            self._tokens.put(digest, cached, None if reviewed else self._negative_ttl)
        if not isinstance(cached, Identity):
            metrics.AUTH_DECISIONS.labels("bad_token").inc()
            raise AuthError(401, "unauthorized", "the bearer token was rejected by the Kubernetes API server")
        metrics.AUTH_DECISIONS.labels("authenticated").inc()
        return cached

    async def _review(self, token: str) -> Identity | None:
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        try:
            result = await self._kube.create(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
            )
        except KubeError as exc:
            log.error("TokenReview failed: %s", exc)
            raise AuthError(503, "unavailable", "cannot verify tokens right now; retry later") from exc
        status = result.get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        return Identity(
            username=user.get("username", ""),
            uid=user.get("uid", ""),
            groups=tuple(user.get("groups") or ()),
            extra={k: list(v) for k, v in (user.get("extra") or {}).items()},
        )

    async def allowed(self, identity: Identity, namespace: str, verb: str) -> bool:
        if identity.anonymous_dev:
            return True
        key = (identity, namespace, verb)
        cached = self._access.get(key)
        if cached is not None:
            return cached
        spec: dict[str, Any] = {
            "user": identity.username,
            "groups": list(identity.groups),
            "resourceAttributes": {"namespace": namespace, "verb": verb, "group": GROUP, "resource": PLURAL},
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
            return False
        decision = bool((result.get("status") or {}).get("allowed"))
        self._access.put(key, decision)
        metrics.AUTH_DECISIONS.labels(f"{verb}_{'allowed' if decision else 'denied'}").inc()
        return decision
