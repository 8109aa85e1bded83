"""A small async Kubernetes API client on aiohttp, configured from the official client's Configuration.

The official client is synchronous; the gateway keeps long watches and many short reviews on its event loop,
so it borrows only the host, TLS material and credentials from the official client's configuration.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agentsession.api.constants import GROUP, PLURAL, VERSION

Manifest = dict[str, Any]


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason


def _ssl_context(configuration: Any) -> ssl.SSLContext | bool:
    if not configuration.host.startswith("https"):
        return False
    ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if not configuration.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        ctx.load_cert_chain(configuration.cert_file, configuration.key_file)
    return ctx


class KubeClient:
    def __init__(self, configuration: Any) -> None:
        self._configuration = configuration
        self._host = configuration.host.rstrip("/")
        self._ssl = _ssl_context(configuration)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None) -> KubeClient:
        from agentsession.controller.kube import load_api_client

        api = load_api_client(kubeconfig)
        return cls(api.configuration)

    def _headers(self) -> dict[str, str]:
        cfg = self._configuration
        # In-cluster tokens rotate; the official client re-reads them through this hook.
        if cfg.refresh_api_key_hook is not None:
            cfg.refresh_api_key_hook(cfg)
        headers = {"Accept": "application/json"}
        auth = cfg.get_api_key_with_prefix("authorization") or cfg.get_api_key_with_prefix("BearerToken")
        if auth:
            headers["Authorization"] = auth
        return headers

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl, limit=64))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        within: float = 30.0,
    ) -> Manifest:
        headers = self._headers()
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        async with self.session.request(
            method,
            self._host + path,
            data=data,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=within),
        ) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise _error(resp.status, text)
            result: Manifest = json.loads(text) if text else {}
            return result

    async def watch_lines(
        self, path: str, params: dict[str, str], inactivity_timeout: float
    ) -> AsyncIterator[Manifest]:
        """Yields watch events; a silent connection for `inactivity_timeout` seconds raises TimeoutError."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=inactivity_timeout)
        async with self.session.get(
            self._host + path, params=params, headers=self._headers(), timeout=timeout
        ) as resp:
            if resp.status >= 400:
                raise _error(resp.status, await resp.text())
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)

    # --- the calls the gateway makes ---

    @staticmethod
    def sessions_path(namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{GROUP}/{VERSION}"
        path = f"{base}/namespaces/{namespace}/{PLURAL}" if namespace else f"{base}/{PLURAL}"
        return f"{path}/{name}" if name else path

    async def patch_session_spec(self, namespace: str, name: str, spec: Manifest) -> Manifest:
        return await self.request(
            "PATCH",
            self.sessions_path(namespace, name),
            {"spec": spec},
            content_type="application/merge-patch+json",
        )

    async def read_secret(self, namespace: str, name: str) -> Manifest:
        return await self.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")

    async def token_review(self, token: str) -> Manifest:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        return await self.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body)

    async def subject_access_review(self, spec: Manifest) -> Manifest:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return await self.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)


def _error(status: int, text: str) -> KubeError:
    try:
        body = json.loads(text)
        return KubeError(status, body.get("message", text), body.get("reason", ""))
    except ValueError:
        return KubeError(status, text[:500])
