"""The gateway's update stream against real agentctl processes: each journal entry once, across restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from agentsession.agentctl_client import AgentctlClient
from agentsession.gateway.upstream import JournalPosition, UpdateStream
from tests.component.conftest import TOKEN, Agentctl, launch, wait_until


async def journal_of(ctl: Agentctl, prompts: list[str]) -> list[dict[str, Any]]:
    await ctl.ok("POST", "/api/v1/start", {})
    for text in prompts:
        await ctl.ok("POST", "/api/v1/acp/prompt", {"prompt": text})
    return await ctl.history()


async def test_a_fresh_journal_is_followed_from_its_start(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    # A fresh workspace whose journal is already longer than the one followed: its seqs are not a sign.
    prepared = await launch(second_dir, http)
    fresh = await journal_of(prepared, ["two", "three", "four"])
    await prepared.stop()

    first = await launch(first_dir, http)
    seen: list[dict[str, Any]] = []
    client = AgentctlClient(http, first.base, TOKEN)
    stream = UpdateStream(
        client,
        # Follow from the first entry, as after an initialize that returned no history.
        JournalPosition(seq=0),
        on_entry=seen.append,
        read_status=client.status,
        on_connected=lambda up: None,
    )
    stream.start()
    try:
        old = await journal_of(first, ["one"])

        async def caught_up(count: int) -> bool:
            return len(seen) >= count

        await wait_until(lambda: caught_up(len(old)), "the stream to deliver the first journal")
        assert len(fresh) > len(old)
        await first.stop()

        # The agent's pod came back with a new workspace: another agentctl, same address, another journal.
        second = await launch(second_dir, http, port=first.port)
        try:
            await wait_until(
                lambda: caught_up(len(old) + len(fresh)), "the stream to deliver the fresh journal"
            )
        finally:
            await second.stop()
    finally:
        await stream.stop()
    assert [e["notification"] for e in seen] == [e["notification"] for e in old + fresh]
    assert [e["seq"] for e in seen] == [e["seq"] for e in old] + [e["seq"] for e in fresh]
