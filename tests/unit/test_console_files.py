"""The web console's files as the gateway serves them: the right content types, a Content-Security-Policy that
allows no inline script, and nothing outside the console folder."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentsession.gateway import console


@pytest.fixture
async def served() -> AsyncIterator[tuple[TestServer, aiohttp.ClientSession]]:
    app = web.Application()
    console.add_routes(app)
    async with TestServer(app) as server, aiohttp.ClientSession() as http:
        yield server, http


async def test_the_page_and_its_modules_have_their_types_and_a_strict_policy(
    served: tuple[TestServer, aiohttp.ClientSession],
) -> None:
    server, http = served
    async with http.get(server.make_url("/")) as page:
        assert page.status == 200
        assert page.content_type == "text/html"
        html = await page.text()
        policy = page.headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["default-src"] == "'none'"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    # No inline script: every <script> loads a file of the console.
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    assert scripts, "the page loads no script"
    assert all('src="/console/' in attrs and not body.strip() for attrs, body in scripts)
    for name, kind in (
        ("app.js", "text/javascript"),
        ("app.css", "text/css"),
        ("transcript.js", "text/javascript"),
    ):
        async with http.get(server.make_url(f"/console/{name}")) as asset:
            assert (asset.status, asset.content_type) == (200, kind), name
            assert "Content-Security-Policy" in asset.headers


@pytest.mark.parametrize(
    "path",
    ["/console/..%2Fconsole.py", "/console/../console.py", "/console/vendor/VERSIONS", "/console/.hidden.js",
     "/console/nope.js"],
)  # fmt: skip
async def test_nothing_outside_the_console_files_is_served(
    served: tuple[TestServer, aiohttp.ClientSession], path: str
) -> None:
    server, http = served
    async with http.get(server.make_url(path)) as answer:
        assert answer.status == 404, path


def test_resolve_keeps_to_the_folder(tmp_path: Path) -> None:
    (tmp_path / "app.js").write_text("")
    (tmp_path / "notes.py").write_text("")
    assert console.resolve(tmp_path, "app.js") == (tmp_path / "app.js").resolve()
    assert console.resolve(tmp_path, "../app.js") is None
    assert console.resolve(tmp_path, "notes.py") is None
    assert console.resolve(tmp_path, "/etc/passwd") is None
