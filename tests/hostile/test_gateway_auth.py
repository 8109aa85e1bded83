"""Gateway authentication against a hostile client: the real gateway process, with authentication on, on the fake
API server (`tests/support/fake_api.py`) whose policy table answers TokenReviews (audiences, expiry, revocation)
and SubjectAccessReviews (extra, resourceNames) and counts every review; real WebSocket clients; a real agentctl
whose shell (`cat`) echoes what one user types to everyone who watches it.

Each test sends one attack and shows the bound: a cross-site handshake refused, 2,000 junk tokens costing a
bounded number of reviews, a connection whose token or access was revoked closed within the re-check interval
with nothing after, a scoped token not inheriting the unscoped one's access, resourceNames granting one session,
no token taken from the URL, no /metrics on the clients' port, client errors without internals, connections of
one user bounded, the kubectl plugin presenting a token for the gateway alone, and the web console signing in
again when its token is revoked. Figures go to stdout (`-s`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentsession.gateway.connection import CLOSE_FORBIDDEN, CLOSE_TOO_MANY_CONNECTIONS, CLOSE_UNAUTHORIZED
from tests.component.conftest import Agentctl, wait_until
from tests.conftest import require_tool
from tests.support.fake_api import FakeApi, User, session_manifest
from tests.support.gateway import Client, GatewayProcess, gateway_process
from tests.support.plugin import built_plugin
from tests.support.release_key import token_of

NS = "team"
TASK = "task-session.v1"
AUDIENCE = "agentsession-gateway"
RECHECK = 1.0  # seconds between the re-checks of an open connection's token and access
MAX_PER_USER = 4
BURST, RATE = 10, 1.0  # failed authentications per client address: in a row, then per second
ALLOWED_ORIGIN = "https://console.example"
JUNK = 2000
# How long after a revocation the connection may still be open: one re-check interval, its reviews, and the close.
CLOSE_WITHIN = RECHECK + 2.0


@dataclass
class Stage:
    api: FakeApi
    gateway: GatewayProcess
    http: aiohttp.ClientSession
    agentctl: Agentctl
    tmp: Path

    def token(self, user: User, **kw: Any) -> str:
        """A token of the gateway's audience for `user`."""
        return self.api.auth.issue(user, audiences=(AUDIENCE,), **kw)

    async def connect(self, token: str | None, *, headers: dict[str, str] | None = None,
                      url: str | None = None) -> Client:  # fmt: skip
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        # The client does not answer the gateway's close frame by itself: aiohttp reports a close it could not
        # answer in time (a busy machine) as 1006, not as the code the gateway sent, which is what is checked.
        ws = await self.http.ws_connect(url or self.gateway.ws_url, protocols=(TASK,),
                                        headers={**auth, **(headers or {})}, autoclose=False)  # fmt: skip
        return Client(ws)

    async def handshake(self, headers: dict[str, str], url: str | None = None) -> int:
        """The HTTP status a WebSocket handshake gets: 101 when it is taken."""
        try:
            ws = await self.http.ws_connect(url or self.gateway.ws_url, protocols=(TASK,), headers=headers)
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status
        await ws.close()
        return 101

    def reviews(self) -> int:
        return len(self.api.auth.token_reviews)

    def reviews_of(self, tokens: Callable[[str], bool], since: int = 0) -> int:
        """TokenReviews sent since the `since`-th of tokens that `tokens` picks out (open connections' re-checks
        of their own tokens go on meanwhile)."""
        return sum(1 for r in self.api.auth.token_reviews[since:] if tokens(r["token"]))


async def ask(client: Client, action: str, **payload: Any) -> dict[str, Any]:
    """One task-dialect request and its answer (a response or an error)."""
    rid = uuid.uuid4().hex
    frame = {"id": rid, "type": "request", "action": action, "payload": payload}
    return await client.request(frame, lambda f: f.get("id") == rid, f"{action} {rid}")


async def closed(client: Client, within: float) -> float:
    """Seconds until the gateway closed `client`'s connection."""
    started = time.monotonic()
    await wait_until(
        _async(lambda: client.closed_code is not None), "the gateway to close the connection", within
    )
    return time.monotonic() - started


def _async(probe: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return probe()

    return check


@asynccontextmanager
async def running_gateway(api: FakeApi, tmp: Path, *args: str) -> AsyncIterator[GatewayProcess]:
    # Started (blocking: it polls /readyz) off the loop, which serves the fake API meanwhile.
    name = uuid.uuid4().hex[:6]
    process = gateway_process(
        str(api.kubeconfig(tmp / f"kubeconfig-{name}")), tmp / f"gateway-{name}.log", *args
    )
    gateway = await asyncio.to_thread(process.__enter__)
    try:
        yield gateway
    finally:
        await asyncio.to_thread(process.__exit__, None, None, None)


@pytest.fixture
async def stage(spawn: Callable[..., Awaitable[Agentctl]], tmp_path: Path) -> AsyncIterator[Stage]:
    """Sessions `ready` and `other` on one agentctl (its shell is `cat`), `gone` whose agentctl is not there;
    alice may get and update in the namespace (unscoped tokens only), bob may get and update, carol may get and
    update the session `ready` only."""
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=60)
            )
        )
        api = await stack.enter_async_context(FakeApi().serving())
        # The gateway derives each session's agentctl token from the release key: `other` shares this agentctl
        # for what the gateway decides before calling it, and its calls are refused.
        ctl = await spawn("--shell", "/bin/cat", token=token_of(NS, "ready"))
        await ctl.ok("POST", "/api/v1/start", {})
        await api.put(session_manifest(NS, "ready", ready=True, endpoint=ctl.base))
        await api.put(session_manifest(NS, "other", ready=True, endpoint=ctl.base))
        await api.put(session_manifest(NS, "gone", ready=True, endpoint="http://127.0.0.1:9"))
        policy = api.auth
        policy.grant("alice", "get", "list", namespace=NS)
        policy.grant("alice", "update", namespace=NS, extra={})
        policy.grant("bob", "get", "list", "update", namespace=NS)
        policy.grant("carol", "get", "list", namespace=NS)
        policy.grant("carol", "update", namespace=NS, names=("ready",))
        gateway = await stack.enter_async_context(running_gateway(
            api, tmp_path, "--token-audience", AUDIENCE, "--auth-recheck-interval", str(RECHECK),
            "--max-connections-per-user", str(MAX_PER_USER), "--auth-failure-burst", str(BURST),
            "--auth-failure-rate", str(RATE), "--allowed-origins", ALLOWED_ORIGIN,
        ))  # fmt: skip
        yield Stage(api, gateway, http, ctl, tmp_path)


ALICE, BOB, CAROL = User("alice", "uid-alice"), User("bob", "uid-bob"), User("carol", "uid-carol")


# ---------------------------------------------------------------- cross-site handshakes


async def test_a_cross_site_handshake_is_refused_before_any_review(stage: Stage) -> None:
    """A page elsewhere opens /ws with the user's credentials riding along (an auth proxy that adds the token from
    a cookie): refused, and the token is not even reviewed."""
    token = stage.token(ALICE)
    bearer = {"Authorization": f"Bearer {token}"}
    reviews = stage.reviews()
    for origin in ("https://evil.example", "null", f"http://evil.example:{stage.gateway.port}"):
        assert await stage.handshake({**bearer, "Origin": origin}) == 403, origin
    async with stage.http.get(
        stage.gateway.ws_url, headers={**bearer, "Origin": "https://evil.example"}
    ) as resp:
        assert (await resp.json())["error"] == "forbidden_origin"
    assert stage.reviews() == reviews
    own = f"http://127.0.0.1:{stage.gateway.port}"
    for origin in (own, ALLOWED_ORIGIN, None):
        assert await stage.handshake({**bearer, **({"Origin": origin} if origin else {})}) == 101, origin
    print(
        "\ncross-site handshake with a valid token: 403 forbidden_origin before any review "
        "(before: accepted, and the page could open the shell)"
    )


async def test_dev_mode_answers_only_loopback_host_names(tmp_path: Path) -> None:
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 is same-origin with itself, so
    a gateway without authentication must refuse any Host name but loopback's."""
    async with FakeApi().serving() as api, aiohttp.ClientSession() as http:
        await api.put(session_manifest(NS, "asleep", suspend=True))
        async with running_gateway(api, tmp_path, "--insecure-dev-mode") as gateway:

            async def status(path: str, headers: dict[str, str]) -> int:
                async with http.get(f"{gateway.http_url}{path}", headers=headers) as resp:
                    return resp.status

            rebound = {
                "Host": f"evil.example:{gateway.port}",
                "Origin": f"http://evil.example:{gateway.port}",
            }
            for path in ("/ws", "/whoami", "/"):
                assert await status(path, rebound) == 403, path
                assert await status(path, {"Host": f"evil.example:{gateway.port}"}) == 403, path
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(gateway.ws_url, headers={"Origin": "http://evil.example"})
            assert refused.value.status == 403
            async with http.ws_connect(gateway.ws_url, headers={"Host": f"localhost:{gateway.port}"}) as ws:
                hello = json.loads((await ws.receive(timeout=10)).data)
                assert hello["type"] == "session_state"
    # Nor will it listen where others can reach it.
    refused_start = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "agentsession-gateway"), "--insecure-dev-mode", "--host", "0.0.0.0",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, said = await asyncio.wait_for(refused_start.communicate(), 60)
    assert refused_start.returncode == 2
    assert "listens on loopback only" in said.decode()


# ---------------------------------------------------------------- junk tokens


async def test_junk_tokens_cost_a_bounded_number_of_reviews(stage: Stage) -> None:
    """2,000 distinct junk tokens from one address: at most the burst and the refill reach the API server; the
    others are answered 429 at once. Another address, and a token already accepted, are served meanwhile."""
    alice = await stage.connect(stage.token(ALICE))  # accepted before the flood: cached
    attacker = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50, local_addr=("127.0.0.2", 0)))
    statuses: dict[int, int] = {}
    reviews = stage.reviews()
    started = time.monotonic()

    async def junk(i: int) -> None:
        headers = {"Authorization": f"Bearer junk-{i:05d}-{uuid.uuid4().hex}"}
        async with attacker.get(stage.gateway.ws_url, headers=headers) as resp:
            statuses[resp.status] = statuses.get(resp.status, 0) + 1

    try:
        await asyncio.gather(*(junk(i) for i in range(JUNK)))
        elapsed = time.monotonic() - started
        sent = stage.reviews_of(lambda t: t.startswith("junk-"), reviews)
        assert sum(statuses.values()) == JUNK
        assert set(statuses) <= {401, 429}, statuses
        assert sent <= BURST + RATE * elapsed + 1, f"{sent} reviews for {JUNK} junk tokens in {elapsed:.1f}s"
        print(
            f"\n{JUNK} junk tokens in {elapsed:.1f}s: {sent} TokenReviews, answers {statuses} (before: {JUNK})"
        )
        # Tokens that cannot be tokens are dropped before any review, however many.
        reviews = stage.reviews()
        absurd = ("has spaces in it", '"quoted"', "<script>", "%00", "x" * 8000 + "!")
        for bad in absurd:
            async with attacker.get(stage.gateway.ws_url, headers={"Authorization": f"Bearer {bad}"}) as resp:
                assert resp.status in (401, 429)
        assert stage.reviews_of(lambda t: t in absurd, reviews) == 0
        # The attacker's address is throttled, and says until when; others are not.
        async with attacker.get(stage.gateway.ws_url, headers={"Authorization": "Bearer junk-more"}) as resp:
            assert resp.status == 429
            assert int(resp.headers["Retry-After"]) >= 1
        assert (await ask(alice, "ping"))["type"] == "response"
        carol = await stage.connect(stage.token(CAROL))
        assert (await ask(carol, "task.list"))["type"] == "response"
    finally:
        await attacker.close()


# ---------------------------------------------------------------- revocation while connected


async def watch_shell(stage: Stage, token: str) -> Client:
    client = await stage.connect(token)
    for action in ("task.subscribe", "shell.subscribe"):
        answer = await ask(client, action, task_id=f"{NS}/ready")
        assert answer["type"] == "response", answer
    return client


async def test_a_revoked_token_ends_the_connection_within_the_recheck(stage: Stage) -> None:
    """bob watches the shell alice types into; his token and his RBAC are removed. His connection gets a typed
    error and close 4001 within one re-check interval, and not one frame after the error."""
    bob_token = stage.token(BOB)
    bob = await watch_shell(stage, bob_token)
    alice = await watch_shell(stage, stage.token(ALICE))
    stage.api.auth.revoke(bob_token)
    stage.api.auth.revoke_grants("bob")
    mark = len(bob.frames)

    async def typing() -> None:
        for n in range(10**6):
            await ask(alice, "shell.input", task_id=f"{NS}/ready", data=f"secret-{n}\n")
            await stage.api.put(session_manifest(NS, "ready", ready=True, endpoint=stage.agentctl.base,
                                                 title=f"title-{n}"))  # fmt: skip
            await asyncio.sleep(0.1)

    typist = asyncio.create_task(typing())
    try:
        took = await closed(bob, CLOSE_WITHIN)
        # Alice goes on typing after bob's close: none of it may reach him.
        seen = len(alice.frames)
        await alice.wait_for("alice's own output after bob's close",
                             lambda f: f.get("action") == "shell.output", since=seen)  # fmt: skip
        await asyncio.sleep(0.5)
    finally:
        typist.cancel()
    after = bob.frames[mark:]
    assert bob.closed_code == CLOSE_UNAUTHORIZED
    assert after[-1]["type"] == "error", after[-1]
    assert after[-1]["payload"]["code"] == "UNAUTHORIZED"
    assert "no longer accepts your token" in after[-1]["payload"]["message"]
    assert took <= CLOSE_WITHIN
    print(
        f"\nrevoked while connected: closed {CLOSE_UNAUTHORIZED} after {took:.1f}s (re-check every {RECHECK:g}s), "
        f"{len(after) - 1} frames before the close ({sum(f.get('action') == 'shell.output' for f in after)} "
        "of them shell output), 0 after (before: 62 frames in 5 s and counting, 37 of another user's shell)"
    )


async def test_withdrawn_access_ends_the_connection(stage: Stage) -> None:
    """bob's token stays valid, but he may no longer update the session whose shell he watches: close 4003."""
    bob = await watch_shell(stage, stage.token(BOB))
    stage.api.auth.revoke_grants("bob")
    stage.api.auth.grant("bob", "get", "list", namespace=NS)
    await closed(bob, CLOSE_WITHIN)
    assert bob.closed_code == CLOSE_FORBIDDEN
    assert bob.frames[-1]["payload"]["code"] == "FORBIDDEN"
    assert f"you may no longer update agentsession {NS}/ready" in bob.frames[-1]["payload"]["message"]
    # A reader that lost `get` in the namespace is closed the same way.
    stage.api.auth.grant("bob", "get", "list", namespace=NS)
    reader = await stage.connect(stage.token(BOB))
    assert (await ask(reader, "task.subscribe", task_id=f"{NS}/ready"))["type"] == "response"
    stage.api.auth.revoke_grants("bob")
    await closed(reader, CLOSE_WITHIN)
    assert reader.closed_code == CLOSE_FORBIDDEN
    assert f"get agentsessions in namespace {NS}" in reader.frames[-1]["payload"]["message"]


async def test_a_connection_ends_when_its_token_expires(stage: Stage, tmp_path: Path) -> None:
    """The token's `exp` ends the connection on time, whatever the re-check interval (a minute here)."""
    async with running_gateway(stage.api, tmp_path, "--token-audience", AUDIENCE, "--auth-recheck-interval",
                               "60") as slow:  # fmt: skip
        token = stage.token(BOB, expires_in=3)
        expires = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==="))["exp"]
        bob = await stage.connect(token, url=slow.ws_url)
        assert (await ask(bob, "task.subscribe", task_id=f"{NS}/ready"))["type"] == "response"
        await closed(bob, 10)
        assert abs(time.time() - expires) < 1.5
        assert bob.closed_code == CLOSE_UNAUTHORIZED
        assert bob.frames[-1]["payload"]["message"] == "your token expired; connect again with a new one"


# ---------------------------------------------------------------- what one answer may grant


async def test_a_scoped_token_does_not_inherit_the_unscoped_tokens_access(stage: Stage) -> None:
    """alice's unscoped token may drive the shell; a token of hers scoped by `extra` may not, although the gateway
    answered the same question for her a moment before."""
    unscoped = await stage.connect(stage.token(ALICE))
    assert (await ask(unscoped, "shell.subscribe", task_id=f"{NS}/ready"))["type"] == "response"
    scoped = await stage.connect(stage.token(User("alice", "uid-alice", extra={"scopes": ["view"]})))
    refused = await ask(scoped, "shell.subscribe", task_id=f"{NS}/ready")
    assert (refused["type"], refused["payload"]["code"]) == ("error", "FORBIDDEN")
    asked = [s for s in stage.api.auth.access_reviews if s["resourceAttributes"]["verb"] == "update"]
    assert [s.get("extra") for s in asked] == [None, {"scopes": ["view"]}]
    print("\nscoped token after the unscoped one: FORBIDDEN (before: allowed from the cache)")


async def test_resource_names_grant_one_session(stage: Stage) -> None:
    """carol may update the session `ready` only (RBAC resourceNames): per-session actions name the session."""
    carol = await stage.connect(stage.token(CAROL))
    assert (await ask(carol, "shell.subscribe", task_id=f"{NS}/ready"))["type"] == "response"
    other = await ask(carol, "shell.subscribe", task_id=f"{NS}/other")
    assert (other["type"], other["payload"]["code"]) == ("error", "FORBIDDEN")
    assert "agentsession other" in other["payload"]["message"]
    names = [s["resourceAttributes"].get("name") for s in stage.api.auth.access_reviews
             if s["resourceAttributes"]["verb"] == "update"]  # fmt: skip
    assert names == ["ready", "other"]
    print("\nresourceNames [ready]: ready allowed, other FORBIDDEN (before: both FORBIDDEN)")


# ---------------------------------------------------------------- what the gateway exposes


async def test_no_token_from_the_url_and_no_metrics_on_the_clients_port(stage: Stage) -> None:
    token = stage.token(ALICE)
    assert await stage.handshake({}, url=f"{stage.gateway.ws_url}?access_token={token}") == 401
    async with stage.http.get(f"{stage.gateway.http_url}/whoami?access_token={token}") as resp:
        assert resp.status == 401
    async with stage.http.get(f"{stage.gateway.http_url}/metrics") as resp:
        assert resp.status == 404
    async with stage.http.get(stage.gateway.metrics_url) as resp:
        assert resp.status == 200
        assert "agentsession_gateway_auth_total" in await resp.text()
    metrics_base = stage.gateway.metrics_url.removesuffix("/metrics")
    for probe in ("/healthz", "/readyz"):
        async with stage.http.get(metrics_base + probe) as resp:
            assert resp.status == 200, probe
    for path in ("/ws", "/whoami", "/"):
        async with stage.http.get(metrics_base + path) as resp:
            assert resp.status == 404, path


async def test_client_errors_carry_no_internals(stage: Stage) -> None:
    alice = await stage.connect(stage.token(ALICE))
    failed = await ask(alice, "session.prompt", task_id=f"{NS}/gone", text="hello")
    assert (failed["type"], failed["payload"]["code"]) == ("error", "UPSTREAM_ERROR")
    message = failed["payload"]["message"]
    for internal in ("127.0.0.1", ":9", "http://", "Error", "Exception", "ssl", "Connect call"):
        assert internal not in message, message
    # A frame nested past the parser's depth is bad input, answered in the dialect, never an internal error.
    mark = len(alice.frames)
    await alice.send('{"id": "deep", "type": "request", "action": "ping", "payload": {"x": '
                     + "[" * 100_000 + "]" * 100_000 + "}}")  # fmt: skip
    answer = await alice.wait_for("the nested frame's error", lambda f: f["type"] == "error", since=mark)
    assert answer["payload"]["code"] == "BAD_REQUEST"
    assert answer["payload"]["message"] == "message is not valid JSON: nested too deeply"
    assert (await ask(alice, "ping"))["type"] == "response"
    log = [json.loads(line) for line in stage.gateway.output().splitlines() if line.startswith("{")]
    assert not [line for line in log if line["level"] in ("error", "critical")]
    print(
        f"\nan unreachable agentctl, as the client reads it: {message!r} (before: 'agentctl at "
        "http://127.0.0.1:9 is not reachable: ClientConnectorError Cannot connect to host 127.0.0.1:9 ...')"
    )


async def test_connections_of_one_user_are_bounded(stage: Stage) -> None:
    token = stage.token(ALICE)
    mine = [await stage.connect(token) for _ in range(MAX_PER_USER)]
    for client in mine:
        assert (await ask(client, "ping"))["type"] == "response"
    extra = await stage.connect(token)
    await closed(extra, 10)
    assert extra.closed_code == CLOSE_TOO_MANY_CONNECTIONS
    assert [f["payload"]["code"] for f in extra.frames] == ["TOO_MANY_CONNECTIONS"]
    # Another user is not affected, and a connection closed makes room.
    assert (await ask(await stage.connect(stage.token(CAROL)), "ping"))["type"] == "response"
    await mine.pop().close()

    async def admitted() -> bool:
        client = await stage.connect(token)
        try:
            return (await ask(client, "ping"))["type"] == "response"
        except AssertionError:  # told too_many_connections and closed, the ping unanswered
            return False
        finally:
            await client.close()

    assert await wait_until(admitted, "room for one more connection of alice")
    print(
        f"\nconnections of one user: {MAX_PER_USER} served, the next one told TOO_MANY_CONNECTIONS and closed "
        f"{CLOSE_TOO_MANY_CONNECTIONS} (before: 100 of 100 served)"
    )


async def test_only_tokens_for_the_gateways_audience_are_taken(stage: Stage) -> None:
    """A token of the API server's own audience (a kubeconfig's) is refused by a gateway with an audience."""
    api_token = stage.api.auth.issue(ALICE)
    assert await stage.handshake({"Authorization": f"Bearer {api_token}"}) == 401
    assert stage.api.auth.token_reviews[-1]["audiences"] == [AUDIENCE]
    assert await stage.handshake({"Authorization": f"Bearer {stage.token(ALICE)}"}) == 101


# ---------------------------------------------------------------- the kubectl plugin's token


async def run_plugin_file(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    """The plugin's one file run as a program, the way kubectl runs it."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("AGENTSESSION_TOKEN", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(built_plugin()), *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


async def test_the_plugin_presents_a_token_for_the_gateway_alone(stage: Stage) -> None:
    """A kubeconfig user that is a ServiceAccount: the plugin requests it a token for the gateway's audience, and
    the kubeconfig's own token (good for the whole API) never reaches the gateway. Any other user is told what to
    give instead, and plain ws:// to another machine is refused before anything is sent."""
    account = User(f"system:serviceaccount:{NS}:dev", "uid-dev")
    policy = stage.api.auth
    policy.grant(account.username, "get", "list", "update", namespace=NS)
    policy.grant(account.username, "create", namespace=NS, names=("dev",), resource="serviceaccounts/token")
    own = policy.issue(account)
    kubeconfig = stage.api.kubeconfig(stage.tmp / "dev-kubeconfig", token=own, namespace=NS)
    run = await run_plugin_file("history", "ready", "--gateway", stage.gateway.ws_url, kubeconfig=kubeconfig)
    assert run.returncode == 0, run
    reviewed = [r["token"] for r in policy.token_reviews]
    assert own not in reviewed, "the kubeconfig's own token was sent to the gateway"
    minted = policy.tokens[reviewed[-1]]
    assert (minted.user.username, minted.audiences) == (account.username, (AUDIENCE,))

    alice_own = policy.issue(ALICE)
    person = stage.api.kubeconfig(stage.tmp / "alice-kubeconfig", token=alice_own, namespace=NS)
    refused = await run_plugin_file("history", "ready", "--gateway", stage.gateway.ws_url, kubeconfig=person)
    assert refused.returncode == 1, refused
    assert "(alice) is not a ServiceAccount" in refused.stderr
    assert "--send-kubeconfig-token" in refused.stderr
    assert stage.reviews_of(lambda t: t == alice_own) == 0

    cleartext = await run_plugin_file("history", "ready", "--gateway", "ws://gateway.example:8090",
                                      kubeconfig=kubeconfig)  # fmt: skip
    assert cleartext.returncode == 1, cleartext
    assert "is not encrypted" in cleartext.stderr
    assert "--insecure" in cleartext.stderr


# ---------------------------------------------------------------- the web console


async def test_the_console_signs_in_again_when_its_token_is_revoked(stage: Stage) -> None:
    """The console's page is the gateway's own origin, so its WebSocket passes the Origin check; once its token is
    revoked, the gateway closes it (4001) and the page, instead of reconnecting with a dead token, shows the
    sign-in form with the gateway's reason."""
    chromium = require_tool("chromium")
    from playwright.async_api import async_playwright, expect

    token = stage.token(CAROL)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium)
        try:
            page = await browser.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            await page.goto(f"{stage.gateway.http_url}/")
            await page.fill("#token", token)
            await page.press("#token", "Enter")
            # Locator assertions: the page's Content-Security-Policy forbids the eval a predicate would need.
            await expect(page.locator("#connection")).to_have_text("Connected", timeout=30_000)
            stage.api.auth.revoke(token)
            await expect(page.locator("#view-sign-in")).to_be_visible(timeout=(CLOSE_WITHIN + 5) * 1000)
            await expect(page.locator("#sign-in-error")).to_have_text(
                "the bearer token was rejected by the Kubernetes API server"
            )
            assert problems == []
        finally:
            await browser.close()
