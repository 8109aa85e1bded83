"""The gateway's own clients read a history of many pages whole and in order: the web console in headless
Chromium, and `kubectl agentsession history` and `attach` run as processes. The real gateway process (dev mode, on
the fake Kubernetes API of `tests/support/fake_api.py`) serves a session whose agentctl is the stand-in
(`benchmarks/agentctl_standin.py`), with a journal of 2,500 agent messages: three of agentctl's pages."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from benchmarks.agentctl_standin import Journal
from benchmarks.agentctl_standin import build_app as standin_app

from agentsession.api.constants import TOKEN_KEY, token_secret_name
from tests.component.test_gateway_fuzz import NS, session
from tests.gateway.test_console import browser
from tests.support.fake_api import FakeApi
from tests.support.gateway import GatewayProcess, gateway_process
from tests.support.plugin import built_plugin

__all__ = ["browser"]

NAME = "long"
AGENT = f"{NS}/{NAME}"
ENTRIES = 2500  # three pages of agentctl's 1000 entries
# The stand-in's entry n is an agent message chunk saying n in eight digits: the transcript runs them together.
SAID = "".join(f"{n:08d}" for n in range(1, ENTRIES + 1))
WAIT = 60.0


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(FakeApi().serving())
        standin = await stack.enter_async_context(TestServer(standin_app(Journal(ENTRIES, 0))))
        running = gateway_process(
            str(api.kubeconfig(tmp_path / "kubeconfig")), tmp_path / "gateway.log", "--insecure-dev-mode"
        )
        # The gateway starts (blocking: it polls /readyz) off the loop, which serves the fake API meanwhile.
        gateway = await asyncio.to_thread(running.__enter__)
        stack.push_async_callback(asyncio.to_thread, running.__exit__, None, None, None)
        api.put_secret(NS, token_secret_name(NAME), {TOKEN_KEY: base64.b64encode(b"any").decode()})
        await api.put(session(NAME, ready=True, endpoint=str(standin.make_url("")).rstrip("/")))
        yield gateway


async def plugin(gateway: GatewayProcess, *args: str) -> str:
    """`kubectl agentsession ARGS` (the plugin's one file, run as kubectl runs it), with stdin at its end."""
    # A token of its own: the gateway in dev mode takes any, and no kubeconfig the environment names is asked.
    command = [sys.executable, str(built_plugin()), *args, NAME, "-n", NS, "--gateway", gateway.ws_url]
    command += ["--token", "dev-mode-takes-any"]
    done = await asyncio.to_thread(
        subprocess.run, command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_kubectl_agentsession_history_and_attach_read_every_page(gateway: GatewayProcess) -> None:
    entries = [json.loads(line) for line in (await plugin(gateway, "history", "-o", "json")).splitlines()]
    assert [entry["seq"] for entry in entries] == list(range(1, ENTRIES + 1))
    # In text, the chunks run into one paragraph of the agent's.
    text = await plugin(gateway, "history")
    assert "".join(text.split()) == f"agent:{SAID}"
    # attach shows the whole history, then says it is attached; stdin at its end, it leaves.
    attached = await plugin(gateway, "attach")
    history, _, rest = attached.partition("[attached to")
    assert "".join(history.split()) == f"agent:{SAID}"
    assert rest.startswith(f" {AGENT}: ready")


async def test_the_console_shows_a_history_of_many_pages(gateway: GatewayProcess, browser: Any) -> None:
    from playwright.async_api import expect

    page = await browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    await page.goto(f"{gateway.http_url}/#/session/{NS}/{NAME}")
    agent = page.locator("#transcript .entry.agent")
    await expect(agent).to_have_count(1, timeout=WAIT * 1000)
    await expect(agent).to_contain_text(SAID[-80:], timeout=WAIT * 1000)
    assert await agent.text_content() == SAID
    await expect(page.locator("#prompt")).to_be_enabled()
    assert problems == []
    await page.close()
