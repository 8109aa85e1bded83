"""The web console in a real browser shows a session's model usage and a spent budget, and takes no prompt then.

No operator and no pod: the session's status (usage, condition BudgetExhausted) is written through the status
subresource, as the egress proxy and the operator would, in a namespace no test operator serves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gateway.conftest import service_account_token
from tests.gateway.test_console import DESKTOP, WAIT_MS, browser, screenshots
from tests.support.kube import NOWHERE, Sessions
from tests.support.session_status import (
    WHY,
    StandInAgentctl,
    own_namespace,
    stand_in_agentctl,
    write_status,
)

pytestmark = pytest.mark.cluster

__all__ = ["browser", "own_namespace", "stand_in_agentctl"]  # fixtures


@pytest.fixture
def namespace(own_namespace: str) -> str:
    return own_namespace


async def test_the_console_shows_usage_and_a_spent_budget(
    sessions: Sessions,
    namespace: str,
    kube_api: Any,
    start_gateway: Any,
    browser: Any,
    stand_in_agentctl: StandInAgentctl,
    tmp_path: Path,
) -> None:
    from playwright.async_api import expect

    sessions.create("metered", {"title": "Metered", "podTemplate": {"nodeSelector": NOWHERE}})
    write_status(kube_api, namespace, "metered", stand_in_agentctl.port, exhausted=True)
    agent_id = f"{namespace}/metered"
    token = service_account_token(kube_api, namespace, "console-user", ["get", "update"])
    gateway = start_gateway("--namespace", namespace)
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(f"http://127.0.0.1:{gateway.port}/")
    token_field = page.get_by_label("Bearer token")
    await token_field.fill(token)
    await token_field.press("Enter")

    # The list: cost and tokens (input + cached + output), marked while the budget is spent.
    usage = page.locator(f'#sessions-body tr[data-id="{agent_id}"] td.usage')
    await expect(usage).to_have_text("$0.0123 · 6,540 tok", timeout=WAIT_MS)
    await expect(usage).to_have_class("usage exhausted")

    # The session's page: why prompts are refused, every count, and no prompt field to type into.
    await page.locator(f'#sessions-body tr[data-id="{agent_id}"] a').click()
    state = page.locator("#session-state")
    await expect(state).to_contain_text(
        f"Budget exhausted: {WHY}. Raise spec.budget to go on.", timeout=WAIT_MS
    )
    await expect(state).to_contain_text(
        "Usage: 3 model requests, 1,200 input + 5,000 cached + 340 output tokens, $0.0123."
    )
    await expect(page.locator("#prompt")).to_be_disabled()
    await screenshots(tmp_path)(page, "session-budget")

    # The budget is raised (the operator turns the condition False): the page says so without a reload.
    write_status(kube_api, namespace, "metered", stand_in_agentctl.port, exhausted=False)
    await expect(state).not_to_contain_text("Budget exhausted", timeout=WAIT_MS)
    await expect(state).to_contain_text("Usage: 3 model requests")
    await page.goto(f"http://127.0.0.1:{gateway.port}/")
    await expect(usage).to_have_class("usage", timeout=WAIT_MS)
