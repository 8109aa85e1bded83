"""The Kubernetes client's HTTP session: the environment is read once, when connecting, not for every request,
and a proxy it names still carries the requests."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.client
import pytest

from agentsession.api.constants import TOKEN_KEY, token_secret_name
from agentsession.kube.client import connect
from agentsession.kube.ops import decode_token
from agentsession.kube.resources import SECRETS
from tests.support.fake_api import FakeApi

TOKEN = base64.b64encode(b"secret-token").decode()
PROXY_NAMES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY")


@pytest.fixture
async def api(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeApi]:
    for name in PROXY_NAMES:
        monkeypatch.delenv(name, raising=False)
    fake = FakeApi()
    fake.put_secret("ns", token_secret_name("s"), {TOKEN_KEY: TOKEN})
    async with fake.serving():
        yield fake


async def test_no_request_consults_the_environment(
    api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups: list[str] = []

    def counting(original: Any, what: str) -> Any:
        def lookup(*args: Any, **kwargs: Any) -> Any:
            lookups.append(what)
            return original(*args, **kwargs)

        return lookup

    monkeypatch.setattr(
        aiohttp.client, "get_env_proxy_for_url", counting(aiohttp.client.get_env_proxy_for_url, "proxy")
    )
    monkeypatch.setattr(
        aiohttp.ClientSession, "_get_netrc_auth", counting(aiohttp.ClientSession._get_netrc_auth, "netrc")
    )
    kube = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
    try:
        for _ in range(3):
            assert decode_token(await kube.get(SECRETS, "ns", token_secret_name("s"))) == "secret-token"
    finally:
        await kube.close()
    assert lookups == []


async def test_a_proxy_named_by_the_environment_carries_the_requests(
    api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubeconfig names a server no one serves; the proxy (the fake API, answering absolute-form requests)
    is the only way the read can succeed."""
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    kubeconfig.write_text(kubeconfig.read_text().replace(api.url, "http://api.cluster.test:6443"))
    monkeypatch.setenv("HTTP_PROXY", api.url)
    kube = await connect(str(kubeconfig))
    try:
        assert decode_token(await kube.get(SECRETS, "ns", token_secret_name("s"))) == "secret-token"
    finally:
        await kube.close()
