"""The web console in a real browser: Debian's headless Chromium driven by Playwright, against a real gateway
process (authentication on) and a real session whose pod runs on the node.

A person signs in with a service account's token, watches the session become Ready in the list, opens it,
prompts with Enter, answers the permission request, and finds the file the agent wrote by typing into the
session's shell. The connection is then cut and restored: the page says so, reconnects, and shows the
conversation and the terminal once, not twice. Suspend and Resume bring the same conversation back on a new pod. The same pages at a phone's width must not scroll sideways.
Screenshots go to the test's tmp dir (and, with AGENTSESSION_CONSOLE_SCREENSHOTS=DIR, to DIR: that is how
docs/images/console-*.png were made).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _unavailable
from tests.gateway.conftest import service_account_token
from tests.gateway.tcp_proxy import CuttableProxy
from tests.support.kube import Sessions
from tests.support.processes import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]

DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
PROMPT = "Please write demo.txt (this asks for permission)."
WRITTEN = "Written by the demo agent in turn 1."
WAIT_MS = 60_000
# The row of a session still starting: its phase, and the condition's reason that explains it.
STARTING_WITH_A_REASON = """id => {
  const row = document.querySelector(`#sessions-body tr[data-id="${id}"]`);
  return row !== null && row.querySelector(".status").textContent === "initializing"
    && /^(Pending|Starting)$/.test(row.querySelector(".phase").textContent)
    && row.querySelector(".why").textContent.length > 0;
}"""


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Headless Chromium from the OS packages; Playwright cannot download browsers here."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _unavailable("playwright is not installed: pip install -e '.[dev]'")
    chromium = shutil.which("chromium")
    if chromium is None:
        _unavailable("chromium is not installed (hack/tools/install.sh installs Debian's chromium)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium)
        yield launched
        await launched.close()


def screenshots(tmp_path: Path) -> Any:
    copies = os.environ.get("AGENTSESSION_CONSOLE_SCREENSHOTS")

    async def take(page: Any, name: str) -> None:
        path = tmp_path / f"console-{name}.png"
        await page.screenshot(path=str(path))
        if copies:
            shutil.copy(path, Path(copies) / path.name)

    return take


async def no_sideways_scroll(page: Any) -> bool:
    return bool(await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


async def test_a_person_prompts_answers_a_permission_and_sees_the_file_in_the_shell(
    node_operator: OperatorProcess,
    sessions: Sessions,
    namespace: str,
    start_gateway: Any,
    kube_api: Any,
    browser: Any,
    tmp_path: Path,
) -> None:
    from playwright.async_api import expect

    shot = screenshots(tmp_path)
    agent_id = f"{namespace}/console"
    token = service_account_token(kube_api, namespace, "console-user", ["get", "update"])
    gateway = start_gateway("--namespace", namespace)
    # Between the browser and the gateway, to cut the page's connections.
    proxy = CuttableProxy("127.0.0.1", gateway.port)
    proxy.start_in_thread()
    page = await browser.new_page(viewport=DESKTOP)
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    try:
        opened = await page.goto(f"http://127.0.0.1:{proxy.port}/")
        assert opened is not None
        assert "script-src 'self'" in opened.headers["content-security-policy"]

        # Signing in: the token field, Enter; a wrong token is refused with the gateway's reason.
        token_field = page.get_by_label("Bearer token")
        await token_field.fill("not-a-token")
        await token_field.press("Enter")
        await expect(page.locator("#sign-in-error")).to_contain_text("rejected", timeout=WAIT_MS)
        await token_field.fill(token)
        await token_field.press("Enter")
        await expect(page.locator("#identity")).to_have_text(
            f"system:serviceaccount:{namespace}:console-user"
        )

        # The session appears while it starts, and goes Ready with its startup timings.
        # A volume, so the journal outlives the pod when it is suspended.
        sessions.create("console", {"title": "Console demo", "workspace": {"size": "64Mi"}})
        row = page.locator(f'#sessions-body tr[data-id="{agent_id}"]')
        await page.wait_for_function(STARTING_WITH_A_REASON, arg=agent_id, timeout=WAIT_MS)
        await expect(row.locator(".status")).to_have_text("ready", timeout=WAIT_MS * 2)
        await expect(row.locator(".phase")).to_have_text("Ready")
        await expect(row.locator(".startup")).to_have_text(re.compile(r"^\d+\.\d s$"), timeout=WAIT_MS)
        await shot(page, "sessions")

        # The session's page: prompt with Enter, answer the permission, read the agent's answer.
        await row.get_by_role("link", name="Console demo").click()
        await expect(page.locator("#session-status")).to_have_text("ready")
        prompt = page.get_by_label("Prompt")
        await expect(prompt).to_be_enabled(timeout=WAIT_MS)
        await prompt.fill(PROMPT)
        await prompt.press("Enter")
        await (
            page.get_by_role("group", name="Permission: Write demo.txt")
            .get_by_role("button", name="Allow")
            .click(timeout=WAIT_MS)
        )
        await expect(page.locator("#transcript .entry.agent").last).to_contain_text(
            "Permission outcome: selected allow", timeout=WAIT_MS
        )
        await expect(page.locator("#transcript .entry.tool").last).to_contain_text("completed")
        await expect(prompt).to_be_enabled(timeout=WAIT_MS)

        # The shell: what the agent wrote is there.
        await expect(page.locator("#terminal-state")).to_have_text(
            "Connected to the session's shell.", timeout=WAIT_MS
        )
        await page.locator("#terminal").click()
        await page.keyboard.type("ls; cat demo.txt\n")
        terminal = page.locator("#terminal .xterm-rows")
        await expect(terminal).to_contain_text(WRITTEN, timeout=WAIT_MS)
        await shot(page, "session")

        # A lost connection: said, then resumed with the same conversation and terminal, nothing twice.
        await expect(page.locator("#transcript .entry.user")).to_have_text([PROMPT])
        conversation = await page.locator("#transcript .entry").all_text_contents()
        proxy.cut()
        await expect(page.locator("#connection")).to_contain_text("Connection lost", timeout=WAIT_MS)
        await expect(page.locator("#terminal-state")).to_contain_text("Shell connection lost")
        await expect(prompt).to_be_disabled()
        proxy.restore()
        await expect(page.locator("#connection")).to_have_text("Connected", timeout=WAIT_MS)
        await expect(prompt).to_be_enabled(timeout=WAIT_MS)
        await expect(page.locator("#transcript .entry")).to_have_text(conversation)
        await expect(page.locator("#terminal-state")).to_have_text(
            "Connected to the session's shell.", timeout=WAIT_MS
        )
        rows = await terminal.inner_text()
        assert rows.count(WRITTEN) == 1, rows

        # Suspend, then resume: a new pod, the same conversation from the journal, the shell attached again.
        await page.get_by_role("button", name="Suspend").click()
        await expect(page.locator("#session-status")).to_have_text("completed", timeout=WAIT_MS)
        await expect(page.locator("#session-state")).to_contain_text("Suspended.")
        await expect(prompt).to_be_disabled()
        await page.get_by_role("button", name="Resume").click()
        await expect(page.locator("#session-status")).to_have_text("ready", timeout=WAIT_MS * 2)
        await expect(prompt).to_be_enabled(timeout=WAIT_MS)
        await expect(page.locator("#transcript .entry")).to_have_text(conversation)
        await expect(page.locator("#terminal-state")).to_have_text(
            "Connected to the session's shell.", timeout=WAIT_MS
        )

        # A phone's width: one column, nothing wider than the screen.
        await page.set_viewport_size(PHONE)
        assert await no_sideways_scroll(page), "the session page scrolls sideways at a phone's width"
        await shot(page, "session-narrow")
        await page.get_by_role("link", name="Sessions").click()
        await expect(row.locator(".status")).to_have_text("ready")
        assert await no_sideways_scroll(page), "the sessions list scrolls sideways at a phone's width"
        await shot(page, "sessions-narrow")

        # Behind an auth proxy that adds the header, and without xterm.js (a gateway built without it): a link to
        # the session opens a working page with no token pasted, and the terminal panel says why it is missing.
        bare = await browser.new_page(
            viewport=DESKTOP, extra_http_headers={"Authorization": f"Bearer {token}"}
        )
        await bare.route("**/console/vendor/**", lambda route: route.abort())
        await bare.goto(f"http://127.0.0.1:{proxy.port}/#/session/{agent_id}")
        await expect(bare.get_by_role("button", name="Sign out")).to_be_hidden()
        await expect(bare.locator("#terminal-state")).to_contain_text("Terminal unavailable", timeout=WAIT_MS)
        await expect(bare.get_by_label("Prompt")).to_be_enabled(timeout=WAIT_MS)
        await expect(bare.locator("#transcript .entry.user")).to_have_text([PROMPT])
        await bare.close()
        csp = [p for p in problems if "Content Security Policy" in p]
        assert csp == [], csp
    finally:
        await page.close()
        proxy.stop_thread()
