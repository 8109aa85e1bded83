"""Fixtures shared by the unit tests of the gateway's registry and of its byte bounds."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.test_agent_registry import Gateway


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    world = Gateway()
    world.cache.start()
    await world.cache.wait_synced()
    yield world
    await world.registry.close()
    await world.cache.stop()
