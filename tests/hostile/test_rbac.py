"""A process that binds agentctl's port while agentctl restarts (the agent can: same pod, same network namespace)
learns nothing it can reuse.

Before: the operator and the gateway sent `Authorization: Bearer <token>`, so the squatter held the token, and
replaying it to the restarted agentctl was accepted. Now the shared client signs each request for one agentctl
instance; the squatter captures signatures for an instance that no longer exists (or its own), and the restarted
agentctl, which chose a new instance id, refuses every one of them. The shared client itself keeps working.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from agentsession.agentctl_client import AgentctlClient, AgentctlError
from agentsession.agentctl_client.signing import Instances
from agentsession.contract.auth import INSTANCE_HEADER, SCHEME, authorization
from agentsession.contract.wire import StartRequest
from tests.component.conftest import Agentctl, free_port

TOKEN = "hostile-rbac-token-" + secrets.token_hex(8)


@dataclass
class Squatter:
    """Listens where agentctl did: names the instance the real agentctl had (it was public), then its own."""

    known_instance: str
    # (method, path with query, Authorization) of each request but /health.
    captured: list[tuple[str, str, str]] = field(default_factory=list)
    runner: web.AppRunner | None = None

    async def leave(self) -> None:
        """Frees the port, as the agent must for agentctl to bind it again."""
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/health":
            return web.json_response({"status": "ok"}, headers={INSTANCE_HEADER: self.known_instance})
        self.captured.append((request.method, request.raw_path, request.headers.get("Authorization", "")))
        # A refusal naming yet another instance: a client that signs again for it hands over one more signature.
        return web.json_response(
            {"success": False, "error": "unauthorized", "message": "try again"},
            status=401,
            headers={INSTANCE_HEADER: secrets.token_hex(16)},
        )


@pytest.fixture
async def squat() -> AsyncIterator[Callable[[int, str], Awaitable[Squatter]]]:
    squatters: list[Squatter] = []

    async def _squat(port: int, known_instance: str) -> Squatter:
        squatter = Squatter(known_instance)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", squatter.handle)
        squatter.runner = web.AppRunner(app)
        await squatter.runner.setup()
        await web.TCPSite(squatter.runner, "127.0.0.1", port).start()
        squatters.append(squatter)
        return squatter

    yield _squat
    for squatter in squatters:
        await squatter.leave()


async def _every_call(client: AgentctlClient) -> None:
    """What the operator and the gateway ask of an agentctl, each refused by the squatter."""
    calls = [
        client.status(),
        client.start(StartRequest(prompt="hello")),
        client.history(after=0),
        client.prompt("run this"),
        client.respond_permission("p1", option_id="allow"),
    ]
    for call in calls:
        with pytest.raises(AgentctlError):
            await call
    for stream in (client.updates(after=0), client.shell()):
        with pytest.raises(AgentctlError):
            async with stream:
                pass


async def test_a_squatter_on_agentctls_port_captures_nothing_the_restarted_agentctl_accepts(
    spawn: Callable[..., Awaitable[Agentctl]],
    http: aiohttp.ClientSession,
    squat: Callable[[int, str], Awaitable[Squatter]],
) -> None:
    port = free_port()
    first = await spawn("--permission-timeout", "3", port=port, token=TOKEN)
    instances = Instances()  # shared by every client of one connector, as in the operator and the gateway
    client = AgentctlClient(http, first.base, TOKEN, instances=instances)
    assert (await client.status()).state == "stopped"
    # agentctl restarts; in between, the agent binds its port.
    await first.stop()
    squatter = await squat(port, first.instance)
    await _every_call(AgentctlClient(http, first.base, TOKEN, instances=instances))

    captured = squatter.captured
    # Every call and stream was signed for the instance it was told of, then once more for the one it was refused
    # with: never more (the client does not loop on a squatter's refusals).
    assert len(captured) == 2 * 7
    assert all(auth.startswith(f"{SCHEME} v1 ") for _, _, auth in captured), captured
    assert not [auth for _, _, auth in captured if TOKEN in auth], "the token itself reached the squatter"

    # The squatter is gone, agentctl is back on its port (a new process, a new instance id).
    await squatter.leave()
    second = await spawn("--permission-timeout", "3", port=port, token=TOKEN)
    assert second.instance != first.instance
    accepted = []
    for method, path, auth in captured:
        async with http.request(method, second.base + path, headers={"Authorization": auth}) as answer:
            body = await answer.json()
            if answer.status != 401:
                accepted.append((method, path, answer.status))
            else:
                assert "another agentctl instance" in body["message"], body
    assert accepted == [], f"replayed signatures accepted: {accepted}"
    assert (await second.status())["state"] == "stopped", "none of the replays reached the agent"

    # The operator's and the gateway's client go on: the refusal names the new instance, and they sign for it.
    assert (await client.status()).state == "stopped"


async def test_a_signature_captured_on_the_way_is_good_for_nothing_but_its_one_request(
    agentctl: Agentctl, http: aiohttp.ClientSession
) -> None:
    path = "/api/v1/status"
    header = {"Authorization": authorization(agentctl.token, agentctl.instance, "GET", path)}
    async with http.get(agentctl.base + path, headers=header) as answer:
        assert answer.status == 200
    async with http.get(agentctl.base + path, headers=header) as replay:
        assert replay.status == 401
        assert "used before" in (await replay.json())["message"]
    # Another request under the same signature: the method, path and query are signed.
    for method, other in (("POST", "/api/v1/start"), ("GET", "/api/v1/history"), ("GET", path + "?x=1")):
        fresh = {"Authorization": authorization(agentctl.token, agentctl.instance, "GET", path)}
        async with http.request(method, agentctl.base + other, headers=fresh) as answer:
            assert answer.status == 401, (method, other)
            assert (await answer.json())["message"] == "invalid signature"
