"""Just enough of the Kubernetes API for a gateway that needs no cluster: AgentSessions listed and watched across
all namespaces, merge patches of them, and Secrets read by name. Anything else is a 404 Status, as from a real
API server that does not serve it.

It runs in the caller's event loop, so a change it writes is a watch event sent at a known instant.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from agentsession.api.constants import GROUP, PLURAL, VERSION

Manifest = dict[str, Any]
Key = tuple[str, str]
SESSIONS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


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


class FakeApi:
    def __init__(self) -> None:
        self.version = 1
        self.sessions: dict[Key, Manifest] = {}
        self.secrets: dict[Key, Manifest] = {}
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

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))  # fmt: skip
        return path

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[FakeApi]:
        app = web.Application()
        app.router.add_get(SESSIONS_PATH, self._sessions)
        app.router.add_patch(f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}/{{name}}", self._patch)
        app.router.add_get("/api/v1/namespaces/{ns}/secrets/{name}", self._secret)
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
