"""Just enough of the Kubernetes API for a gateway that needs no cluster: AgentSessions listed and watched across
all namespaces, merge patches of them, and Secrets read by name; with a policy table (`FakeApi.auth`), also
TokenReview, SubjectAccessReview, SelfSubjectReview and TokenRequest. Anything else is a 404 Status, as from a real
API server that does not serve it.

It runs in the caller's event loop, so a change it writes is a watch event sent at a known instant.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from agentsession.api.constants import GROUP, PLURAL, VERSION

Manifest = dict[str, Any]
Key = tuple[str, str]
SESSIONS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
CREATED = "2026-01-01T00:00:00Z"


def session_manifest(namespace: str, name: str, *, ready: bool = False, suspend: bool = False,
                     endpoint: str | None = None, title: str | None = None) -> Manifest:  # fmt: skip
    """An AgentSession as the operator leaves it: Ready (with its agentctl at `endpoint`), suspended, or starting."""

    def condition(kind: str, true: bool, reason: str) -> Manifest:
        return {
            "type": kind,
            "status": str(true),
            "reason": reason,
            "message": "",
            "lastTransitionTime": CREATED,
        }

    reason = "Ready" if ready else "Suspended" if suspend else "PodInitializing"
    status: Manifest = {
        "phase": "Ready" if ready else "Suspended" if suspend else "Starting",
        "conditions": [
            condition(kind, ready, reason) for kind in ("AgentctlReady", "AgentInitialized", "Ready")
        ]
        + [condition("Suspended", suspend, "Suspended" if suspend else "Running")],
    }
    if endpoint:
        status |= {"agentctlEndpoint": endpoint, "podIP": "127.0.0.1", "podUID": f"pod-{name}"}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentSession",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": CREATED,
        },
        "spec": {"agent": {"type": "demo"}, "suspend": suspend, "title": title or name},
        "status": status,
    }


def _key(obj: Manifest) -> Key:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def _merge(into: Manifest, patch: Manifest) -> Manifest:
    """A JSON merge patch (RFC 7386): null deletes, objects merge, anything else replaces."""
    merged = dict(into)
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        elif isinstance(value, dict) and isinstance(merged.get(name), dict):
            merged[name] = _merge(merged[name], value)
        else:
            merged[name] = value
    return merged


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}  # fmt: skip
    return web.json_response(body, status=code)


API_AUDIENCE = "https://kubernetes.default.svc"


@dataclass(frozen=True)
class User:
    """Who a token is, as a TokenReview says it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False)

    def status(self) -> Manifest:
        user: Manifest = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            user["uid"] = self.uid
        if self.extra:
            user["extra"] = self.extra
        return user


@dataclass(frozen=True)
class Grant:
    """One rule of the policy table: `verbs` on `resource` for `username` in `namespace` ("": every namespace),
    limited to `names` (RBAC's resourceNames; empty: every object), and, when `extra` is given, only to requests
    whose user.extra is exactly that (a scoped token's extra differs, so the rule does not hold for it)."""

    username: str
    verbs: frozenset[str]
    namespace: str = ""
    names: frozenset[str] = frozenset()
    resource: str = PLURAL
    extra: tuple[tuple[str, tuple[str, ...]], ...] | None = None

    def holds(self, user: str, extra: Manifest, attrs: Manifest) -> bool:
        resource = attrs.get("resource", "")
        if attrs.get("subresource"):
            resource += "/" + attrs["subresource"]
        return (
            user == self.username
            and attrs.get("verb") in self.verbs
            and resource == self.resource
            and self.namespace in ("", attrs.get("namespace", ""))
            and (not self.names or attrs.get("name") in self.names)
            and (self.extra is None or _frozen_extra(extra) == self.extra)
        )


def _frozen_extra(extra: Manifest | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((key, tuple(values)) for key, values in (extra or {}).items()))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Issued:
    user: User
    audiences: tuple[str, ...]
    expires: float | None


class AuthPolicy:
    """Tokens and grants the fake API server answers reviews from, and a count of every review it was asked.

    Tokens are JWT-shaped (header, claims with `aud` and `exp`, a random signature), as service-account tokens are;
    revoking a token or a grant takes effect at the next review, as on a real API server."""

    def __init__(self) -> None:
        self.tokens: dict[str, Issued] = {}
        self.grants: list[Grant] = []
        self.token_reviews: list[Manifest] = []  # every TokenReview spec received, in order
        self.access_reviews: list[Manifest] = []  # every SubjectAccessReview spec received, in order

    def issue(
        self, user: User, *, audiences: tuple[str, ...] = (API_AUDIENCE,), expires_in: float | None = None
    ) -> str:
        expires = None if expires_in is None else time.time() + expires_in
        claims: Manifest = {"sub": user.username, "aud": list(audiences), "jti": secrets.token_hex(8)}
        if expires is not None:
            claims["exp"] = int(expires)
        token = ".".join(
            (
                _b64(b'{"alg":"RS256","typ":"JWT"}'),
                _b64(json.dumps(claims).encode()),
                _b64(secrets.token_bytes(32)),
            )
        )
        self.tokens[token] = Issued(user, audiences, expires)
        return token

    def grant(
        self,
        username: str,
        *verbs: str,
        namespace: str = "",
        names: tuple[str, ...] = (),
        resource: str = PLURAL,
        extra: dict[str, list[str]] | None = None,
    ) -> Grant:
        rule = Grant(username, frozenset(verbs), namespace, frozenset(names), resource,
                     None if extra is None else _frozen_extra(extra))  # fmt: skip
        self.grants.append(rule)
        return rule

    def revoke(self, token: str) -> None:
        self.tokens.pop(token, None)

    def revoke_grants(self, username: str) -> None:
        self.grants = [g for g in self.grants if g.username != username]

    def authenticate(self, token: str, audiences: list[str]) -> tuple[User, list[str]] | None:
        """The user and the audiences both the token and the request accept; None for a token not accepted."""
        issued = self.tokens.get(token)
        if issued is None or (issued.expires is not None and issued.expires <= time.time()):
            return None
        wanted = audiences or [API_AUDIENCE]
        common = [a for a in wanted if a in issued.audiences]
        return (issued.user, common if audiences else []) if common else None

    def allowed(self, spec: Manifest) -> bool:
        attrs = spec.get("resourceAttributes") or {}
        return any(g.holds(spec.get("user", ""), spec.get("extra") or {}, attrs) for g in self.grants)


class FakeApi:
    def __init__(self) -> None:
        self.version = 1
        self.sessions: dict[Key, Manifest] = {}
        self.secrets: dict[Key, Manifest] = {}
        self.auth = AuthPolicy()
        self._watchers: list[web.StreamResponse] = []
        self.url = ""

    async def put(self, obj: Manifest) -> None:
        """Stores an AgentSession under a new resourceVersion and sends it to every watch."""
        self.version += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.version)}}
        kind = "MODIFIED" if _key(obj) in self.sessions else "ADDED"
        self.sessions[_key(obj)] = obj
        line = (json.dumps({"type": kind, "object": obj}) + "\n").encode()
        for watcher in list(self._watchers):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await watcher.write(line)

    def put_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        meta = {"namespace": namespace, "name": name}
        self.secrets[(namespace, name)] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "data": data,
        }

    def kubeconfig(self, path: Path, *, token: str | None = None, namespace: str | None = None) -> Path:
        """A kubeconfig for this server; its user is known by `token`, or by nothing (the gateway's own needs none)."""
        context: Manifest = {"cluster": "fake", "user": "fake"}
        if namespace:
            context["namespace"] = namespace
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token} if token else {}}],
            "contexts": [{"name": "fake", "context": context}],
        }))  # fmt: skip
        return path

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[FakeApi]:
        app = web.Application()
        app.router.add_get(SESSIONS_PATH, self._sessions)
        app.router.add_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}/{{name}}", self._patch)
        app.router.add_get("/api/v1/namespaces/{ns}/secrets/{name}", self._secret)
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", self._access_review)
        app.router.add_post("/apis/authentication.k8s.io/v1/selfsubjectreviews", self._self_review)
        app.router.add_post("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token", self._token_request)
        app.router.add_route("*", "/{tail:.*}", self._not_served)
        runner = web.AppRunner(app, shutdown_timeout=1, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()

    async def _sessions(self, request: web.Request) -> web.StreamResponse:
        # kubernetes_asyncio spells the flag `True`, kubectl `true`.
        if request.query.get("watch", "").lower() not in ("true", "1"):
            return web.json_response(
                {
                    "kind": "AgentSessionList",
                    "items": list(self.sessions.values()),
                    "metadata": {"resourceVersion": str(self.version)},
                }
            )
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        self._watchers.append(resp)
        try:
            # The client ends the watch (its inactivity timeout, or its shutdown); this side only writes.
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await asyncio.sleep(3600)
        finally:
            self._watchers.remove(resp)
        return resp

    async def _patch(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.sessions:
            return _status(404, "NotFound", f"agentsessions {key[1]!r} not found")
        await self.put(_merge(self.sessions[key], await request.json()))
        return web.json_response(self.sessions[key])

    async def _secret(self, request: web.Request) -> web.Response:
        secret = self.secrets.get((request.match_info["ns"], request.match_info["name"]))
        if secret is None:
            return _status(404, "NotFound", f"secrets {request.match_info['name']!r} not found")
        return web.json_response(secret)

    async def _not_served(self, request: web.Request) -> web.Response:
        return _status(404, "NotFound", f"{request.method} {request.path} is not served by this fake API")

    async def _token_review(self, request: web.Request) -> web.Response:
        body = await request.json()
        spec = body.get("spec") or {}
        self.auth.token_reviews.append(spec)
        found = self.auth.authenticate(str(spec.get("token", "")), list(spec.get("audiences") or []))
        status: Manifest = {"authenticated": False, "error": "invalid bearer token"}
        if found is not None:
            user, audiences = found
            status = {"authenticated": True, "user": user.status(), "audiences": audiences}
        return web.json_response({**body, "status": status}, status=201)

    async def _access_review(self, request: web.Request) -> web.Response:
        body = await request.json()
        spec = body.get("spec") or {}
        self.auth.access_reviews.append(spec)
        allowed = self.auth.allowed(spec)
        status = {
            "allowed": allowed,
            **({} if allowed else {"reason": "no rule of the policy table allows it"}),
        }
        return web.json_response({**body, "status": status}, status=201)

    def _caller(self, request: web.Request) -> User | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        found = self.auth.authenticate(token, []) if scheme.lower() == "bearer" else None
        return found[0] if found else None

    async def _self_review(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        if caller is None:
            return _status(401, "Unauthorized", "Unauthorized")
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                "status": {"userInfo": caller.status()}}  # fmt: skip
        return web.json_response(body, status=201)

    async def _token_request(self, request: web.Request) -> web.Response:
        """TokenRequest: a token for the ServiceAccount, for a caller the table lets create serviceaccounts/token."""
        caller = self._caller(request)
        if caller is None:
            return _status(401, "Unauthorized", "Unauthorized")
        ns, name = request.match_info["ns"], request.match_info["name"]
        attrs = {"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": ns,
                 "name": name}  # fmt: skip
        if not self.auth.allowed(
            {"user": caller.username, "extra": caller.extra, "resourceAttributes": attrs}
        ):
            message = f'serviceaccounts "{name}" is forbidden: User "{caller.username}" cannot create serviceaccounts/token'
            return _status(403, "Forbidden", message)
        body = await request.json()
        spec = body.get("spec") or {}
        audiences = tuple(spec.get("audiences") or (API_AUDIENCE,))
        seconds = int(spec.get("expirationSeconds") or 3600)
        account = User(f"system:serviceaccount:{ns}:{name}", uid=f"uid-{ns}-{name}",
                       groups=("system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"))  # fmt: skip
        token = self.auth.issue(account, audiences=audiences, expires_in=seconds)
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
        answer = {**body, "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                  "spec": {**spec, "audiences": list(audiences), "expirationSeconds": seconds},
                  "status": {"token": token, "expirationTimestamp": expires}}  # fmt: skip
        return web.json_response(answer, status=201)
