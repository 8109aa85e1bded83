"""Hostile clients of the real gateway process, with a well-behaved client beside them.

Messages of both dialects are generated from the dialects' own tables (valid shapes with hostile values, wrong
types, missing and extra fields, unknown types, text that is not JSON or not an object); frames that are not
messages at all (binary, invalid UTF-8, over the size limit, compressed past it, nested past the parser's depth)
and floods are sent raw. Each gets a typed error of its dialect or a close with a WebSocket close code; the gateway
never logs an unhandled error, keeps serving `/healthz` and new clients, and the well-behaved client keeps getting
its answers and its events throughout.

The gateway runs in dev mode on a fake Kubernetes API (`tests/support/fake_api.py`) that holds three sessions: one
Ready whose agentctl is a real agentctl process with the demo agent, one still starting, one suspended.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.protocol import State
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from agentsession.gateway.connection import CLOSE_SLOW_CONSUMER
from agentsession.gateway.lifecycle_dialect import INBOUND
from agentsession.gateway.server import MAX_CLIENT_FRAME
from agentsession.gateway.task_dialect import ACTIONS
from tests.component.conftest import Agentctl, wait_until
from tests.support.fake_api import FakeApi, session_manifest
from tests.support.gateway import Client, GatewayProcess, gateway_process
from tests.support.release_key import token_of

LIFECYCLE = "agent-lifecycle.v1"
TASK = "task-session.v1"
NS = "fuzz"
READY, STARTING, ASLEEP = f"{NS}/ready", f"{NS}/starting", f"{NS}/asleep"
ANSWER_WAIT = 15.0
EXAMPLES = 200  # per dialect; each is one request and its answer on loopback
# The bystander asks this often, and each answer must come within the bound, whatever the others send.
PING_EVERY = 0.1
PING_BOUND = 5.0
ABNORMAL_CLOSURE = 1006

LIFECYCLE_CODES = {"invalid_json", "bad_request", "unknown_action", "validation_error", "not_found", "forbidden",
                   "conflict", "timeout", "agentctl_not_ready", "upstream_error", "slow_consumer",
                   "too_many_requests", "internal_error"}  # fmt: skip
TASK_CODES = {"BAD_REQUEST", "UNKNOWN_ACTION", "VALIDATION_ERROR", "NOT_FOUND", "UNAUTHORIZED", "FORBIDDEN",
              "CONFLICT", "TIMEOUT", "AGENTCTL_NOT_READY", "UPSTREAM_ERROR", "SLOW_CONSUMER",
              "TOO_MANY_REQUESTS", "INTERNAL_ERROR"}  # fmt: skip
LIFECYCLE_ANSWERS = {"ack", "pong", "session_state", "agent_initialized", "error"}


# ---------------------------------------------------------------- the stage


def session(name: str, *, ready: bool = False, suspend: bool = False, endpoint: str | None = None,
            title: str | None = None) -> dict[str, Any]:  # fmt: skip
    return session_manifest(NS, name, ready=ready, suspend=suspend, endpoint=endpoint, title=title)


@dataclass
class Stage:
    api: FakeApi
    gateway: GatewayProcess
    http: aiohttp.ClientSession
    agentctl: Agentctl

    async def retitle(self, title: str) -> None:
        """A change to the ready session, which every client sees as an agent_status."""
        await self.api.put(session("ready", ready=True, endpoint=self.agentctl.base, title=title))


@pytest.fixture
def gateway_args() -> tuple[str, ...]:
    return ()


@pytest.fixture
async def stage(
    spawn: Callable[..., Awaitable[Agentctl]],
    http: aiohttp.ClientSession,
    tmp_path: Path,
    gateway_args: tuple[str, ...],
) -> AsyncIterator[Stage]:
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(FakeApi().serving())
        await api.put(session("starting"))
        await api.put(session("asleep", suspend=True))
        running = gateway_process(
            str(api.kubeconfig(tmp_path / "kubeconfig")), tmp_path / "gateway.log",
            "--insecure-dev-mode", "--init-timeout", "1", *gateway_args,
        )  # fmt: skip
        # The gateway starts (blocking: it polls /readyz) off the loop, which serves the fake API meanwhile, and
        # while agentctl starts.
        starting = asyncio.create_task(asyncio.to_thread(running.__enter__))

        async def stop_gateway() -> None:
            await starting
            await asyncio.to_thread(running.__exit__, None, None, None)

        stack.push_async_callback(stop_gateway)
        # `cat` stands in for the terminal's shell: fuzzed input is echoed, never run.
        # With the token the gateway derives for the session, as the operator would have written it.
        ctl = await spawn("--permission-timeout", "0.5", "--shell", "/bin/cat", token=token_of(NS, "ready"))
        await ctl.ok("POST", "/api/v1/start", {})
        gateway = await starting
        await api.put(session("ready", ready=True, endpoint=ctl.base))

        async def sees_all() -> bool:
            async with http.get(gateway.http_url + "/readyz") as resp:
                return bool((await resp.json())["sessions"] == 3)

        await wait_until(sees_all, "the gateway to see the ready session")
        yield Stage(api, gateway, http, ctl)


def pong_of(rid: str) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f["type"] == "pong" and f["payload"]["requestId"] == rid


def sending(data: str | bytes, *, text: bool | None = None) -> Callable[[ClientConnection], None]:
    return lambda ws: ws.send(data, text=text)


class Bystander:
    """A well-behaved lifecycle client: it initialized the ready agent, and pings on a schedule."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.latencies: list[float] = []
        self.unanswered: list[str] = []
        self._pinger = asyncio.create_task(self._ping())

    @classmethod
    async def join(cls, stage: Stage) -> Bystander:
        client = Client(await stage.http.ws_connect(stage.gateway.ws_url, protocols=(LIFECYCLE,)))
        await client.wait_for("session_state", lambda f: f["type"] == "session_state")
        init = {"type": "initialize_agent_request", "agentId": READY, "requestId": "bystander-init"}
        await client.request(init, lambda f: f["type"] == "agent_initialized", "agent_initialized")
        return cls(client)

    async def _ping(self) -> None:
        for n in range(10**6):
            rid = f"bystander-{n}"
            started = time.monotonic()
            try:
                await self.client.request(
                    {"type": "ping", "requestId": rid}, pong_of(rid), rid, within=PING_BOUND
                )
            except AssertionError:
                self.unanswered.append(rid)
                return
            self.latencies.append(time.monotonic() - started)
            await asyncio.sleep(PING_EVERY)

    def updates(self) -> int:
        return sum(f["type"] == "agent_update" for f in self.client.frames)

    async def still_served(self, stage: Stage) -> None:
        """Unaffected by what others sent: every ping answered in time, never closed, and still sees changes."""
        assert self.client.closed_code is None, f"the bystander was closed with {self.client.closed_code}"
        assert not self.unanswered, f"pings of the bystander went unanswered: {self.unanswered}"
        assert self.latencies, "the bystander never got a pong"
        title = f"after-{uuid.uuid4().hex[:8]}"
        mark = len(self.client.frames)
        await stage.retitle(title)
        await self.client.wait_for(
            "the change made after the hostile traffic",
            lambda f: f["type"] == "agent_status" and f["payload"]["info"]["title"] == title,
            since=mark,
        )

    async def leave(self) -> None:
        self._pinger.cancel()
        with suppress(asyncio.CancelledError):
            await self._pinger
        await self.client.close()


@pytest.fixture
async def bystander(stage: Stage) -> AsyncIterator[Bystander]:
    joined = await Bystander.join(stage)
    yield joined
    await joined.leave()


async def gateway_still_serves(stage: Stage) -> None:
    """Alive, healthy, accepting clients, and nothing it handled ended in an unhandled error."""
    assert stage.gateway.proc.poll() is None, f"the gateway exited: {stage.gateway.output()[-3000:]}"
    async with stage.http.get(stage.gateway.http_url + "/healthz") as resp:
        assert resp.status == 200
    newcomer = Client(await stage.http.ws_connect(stage.gateway.ws_url))
    hello = await newcomer.wait_for("session_state", lambda f: f["type"] == "session_state")
    assert sorted(a["id"] for a in hello["payload"]["agents"]) == [ASLEEP, READY, STARTING]
    await newcomer.close()
    lines = [json.loads(line) for line in stage.gateway.output().splitlines() if line.startswith("{")]
    errors = [line for line in lines if line["level"] in ("error", "critical")]
    assert errors == [], f"the gateway logged errors: {errors[:3]}"


# ---------------------------------------------------------------- generated messages


@dataclass(frozen=True)
class Probe:
    """One client frame and what its answer must be."""

    text: str
    # Error codes the answer may carry (in the dialect's spelling); None: any answer but an internal error.
    codes: frozenset[str] | None
    # The request id the answer must echo; None: not checked (the frame had no usable id).
    echo: str | None
    label: str


HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(categories=["Cs", "Cc", "Zs", "So"]), max_size=20),
    st.sampled_from(["\x00", "\ud800", "\udfff", "../../etc/passwd", "$(id)", "%s%n", "\u202e", "🙂" * 50,
                     "x" * 70_000, "{}", "null", "ask", "code", "allow", "reject", "permission please"]),
)  # fmt: skip
AGENT_IDS = st.one_of(
    st.sampled_from([READY, READY, STARTING, ASLEEP]),
    st.sampled_from([f"{NS}/missing", "other/ready", "a/b/c", "/ready", f"{NS}/", "/", NS, f"{NS}/ready/../x",
                     f" {READY}", f"{READY}\x00", READY.upper()]),
    HOSTILE_TEXT,
)  # fmt: skip
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
NOT_A_STRING = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.lists(JSON_SCALARS, max_size=2),
    st.dictionaries(st.text(max_size=5), JSON_SCALARS, max_size=2),
)  # fmt: skip
IDS = st.one_of(st.text(max_size=30), st.integers(-(2**70), 2**70))
BAD_IDS = st.one_of(
    st.floats(allow_nan=False),
    st.lists(JSON_SCALARS, max_size=2),
    st.dictionaries(st.text(max_size=3), JSON_SCALARS, max_size=2),
)


def not_json() -> st.SearchStrategy[str]:
    def broken(text: str) -> bool:
        try:
            json.loads(text)
        except ValueError:
            return True
        return False

    return st.one_of(
        st.sampled_from(
            ["", "{", '{"type": "ping"', "{'type': 'ping'}", "[1,]", "NaN-ish", "\ufeff{}", "{}{}"]
        ),
        st.text(max_size=60).filter(broken),
    )


PLAIN = {"agentId": READY, "task_id": READY, "text": "hello", "modeId": "code", "mode_id": "code",
         "permissionId": "p-1", "pending_id": "p-1", "optionId": "allow", "option_id": "allow", "data": "echo\n"}  # fmt: skip


def field_value(name: str) -> st.SearchStrategy[str]:
    if name in ("agentId", "task_id"):
        return AGENT_IDS.filter(bool)
    return HOSTILE_TEXT.filter(bool)


def extras(reserved: set[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.text(max_size=10).filter(lambda k: k not in reserved), JSON_VALUES, max_size=3)


@dataclass
class Dialect:
    """How to build and check the frames of one dialect."""

    name: str
    table: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]
    name_key: str  # "type" or "action"
    id_key: str  # "requestId" or "id"
    codes: set[str]
    malformed: str  # the code of a frame that is not a JSON object
    not_json: str
    unknown: str
    invalid: str

    def wrap(self, kind: Any, fields: dict[str, Any], extra: dict[str, Any], ident: Any) -> dict[str, Any]:
        if self.name == LIFECYCLE:
            message = {**extra, **fields, "type": kind}
        else:
            message = {**extra, "type": "request", "action": kind, "payload": fields}
        if ident is not None:
            message[self.id_key] = ident
        return message

    def probe(self, message: dict[str, Any], codes: set[str] | None, label: str) -> Probe:
        ident = message.get(self.id_key)
        usable = isinstance(ident, str | int) and not isinstance(ident, bool)
        return Probe(json.dumps(message), None if codes is None else frozenset(codes),
                     str(ident) if usable else None, label)  # fmt: skip

    def plain(self) -> list[Probe]:
        """Each message of the table in a valid shape with ordinary values, addressed to the ready agent, to one
        that is starting, and to one that does not exist."""
        probes = []
        for kind, (_, required, optional) in sorted(self.table.items()):
            targets = (
                (READY, STARTING, f"{NS}/missing") if {"agentId", "task_id"} & set(required) else (None,)
            )
            for n, target in enumerate(targets):
                fields = {name: PLAIN.get(name, "x") for name in required + optional}
                fields |= {name: target for name in ("agentId", "task_id") if name in required}
                message = self.wrap(kind, fields, {}, f"plain-{kind}-{n}")
                probes.append(self.probe(message, None, f"valid {kind}"))
        return probes

    def messages(self) -> st.SearchStrategy[Probe]:
        reserved = {"type", "action", "payload", "id", "requestId", "cancelled"} | {
            name for _, required, optional in self.table.values() for name in required + optional
        }

        @st.composite
        def valid(draw: st.DrawFn) -> Probe:
            kind = draw(st.sampled_from(sorted(self.table)))
            _, required, optional = self.table[kind]
            fields: dict[str, Any] = {name: draw(field_value(name)) for name in required}
            for name in optional:
                if draw(st.booleans()):
                    fields[name] = draw(field_value(name))
            if kind in ("agent_permission_response", "permission.respond") and draw(st.booleans()):
                fields["cancelled"] = draw(st.one_of(st.booleans(), NOT_A_STRING))
            message = self.wrap(kind, fields, draw(extras(reserved)), draw(st.one_of(st.none(), IDS)))
            return self.probe(message, None, f"valid {kind}")

        @st.composite
        def broken_field(draw: st.DrawFn) -> Probe:
            kinds = sorted(k for k, (_, required, _) in self.table.items() if required)
            kind = draw(st.sampled_from(kinds))
            _, required, _ = self.table[kind]
            fields: dict[str, Any] = {name: draw(field_value(name)) for name in required}
            victim = draw(st.sampled_from(required))
            how = draw(st.sampled_from(["missing", "wrong type", "empty"]))
            if how == "missing":
                del fields[victim]
            else:
                fields[victim] = "" if how == "empty" else draw(NOT_A_STRING.filter(lambda v: v is not None))
            message = self.wrap(kind, fields, draw(extras(reserved)), draw(st.one_of(st.none(), IDS)))
            return self.probe(message, {self.invalid}, f"{kind} with {victim} {how}")

        @st.composite
        def unknown(draw: st.DrawFn) -> Probe:
            kind = draw(st.text(max_size=30).filter(lambda k: k not in self.table))
            message = self.wrap(kind, {}, draw(extras(reserved)), draw(st.one_of(st.none(), IDS)))
            return self.probe(message, {self.unknown}, "unknown kind")

        @st.composite
        def unnamed(draw: st.DrawFn) -> Probe:
            message = self.wrap(None, {}, draw(extras(reserved)), draw(st.one_of(st.none(), IDS)))
            name = draw(st.one_of(st.just(None), NOT_A_STRING))
            if name is None:
                del message[self.name_key]
            else:
                message[self.name_key] = name
            return self.probe(message, {self.malformed}, "kind missing or not a string")

        @st.composite
        def bad_id(draw: st.DrawFn) -> Probe:
            kind = draw(st.sampled_from(sorted(self.table)))
            message = self.wrap(kind, {}, {}, draw(BAD_IDS))
            return self.probe(message, {self.invalid}, "id of a wrong type")

        shapes = [valid(), valid(), valid(), broken_field(), unknown(), unnamed(), bad_id(),
                  not_json().map(lambda text: Probe(text, frozenset({self.not_json}), None, "not JSON")),
                  JSON_VALUES.filter(lambda v: not isinstance(v, dict)).map(
                      lambda v: Probe(json.dumps(v), frozenset({self.malformed}), None, "not an object"))]  # fmt: skip
        if self.name == TASK:
            shapes += [self.wrong_envelope(reserved)]
        return st.one_of(shapes)

    def wrong_envelope(self, reserved: set[str]) -> st.SearchStrategy[Probe]:
        @st.composite
        def build(draw: st.DrawFn) -> Probe:
            kind = draw(st.sampled_from(sorted(self.table)))
            message = self.wrap(kind, {}, {}, draw(st.one_of(st.none(), IDS)))
            if draw(st.booleans()):
                message["type"] = draw(st.one_of(st.sampled_from(["response", "notification", "error"]),
                                                 NOT_A_STRING.filter(lambda v: v is not None)))  # fmt: skip
                return self.probe(message, {"BAD_REQUEST"}, "envelope of another type")
            # NOT_A_STRING holds objects too: a payload that is one is not this probe.
            message["payload"] = draw(
                NOT_A_STRING.filter(lambda v: v is not None and not isinstance(v, dict))
            )
            return self.probe(message, {"VALIDATION_ERROR"}, "payload not an object")

        return build()

    def is_answer(self, frame: dict[str, Any]) -> bool:
        if self.name == LIFECYCLE:
            return frame.get("type") in LIFECYCLE_ANSWERS
        return frame.get("type") in ("response", "error")

    def check(self, probe: Probe, frame: dict[str, Any]) -> str:
        """Asserts the answer fits the probe; returns its code, or "ok"."""
        if self.name == LIFECYCLE:
            payload = frame["payload"]
            echoed = payload.get("requestId")
            error = frame["type"] == "error"
        else:
            assert set(frame) == {"id", "type", "action", "payload", "timestamp"}, frame
            payload, echoed, error = frame["payload"], frame["id"], frame["type"] == "error"
        if probe.echo is not None:
            assert echoed == probe.echo, f"{probe.label}: the answer does not echo the id: {frame}"
        if not error:
            assert probe.codes is None, f"{probe.label}: {probe.text[:200]!r} was accepted: {frame}"
            return "ok"
        code = payload["code"]
        assert code in self.codes, f"{probe.label}: untyped error {frame}"
        assert code.lower() != "internal_error", f"{probe.label}: {probe.text[:200]!r} failed inside: {frame}"
        assert isinstance(payload["message"], str), frame
        assert payload["message"], frame
        if probe.codes is not None:
            assert code in probe.codes, f"{probe.label}: {probe.text[:200]!r} -> {code}, not {probe.codes}"
        return str(code)


DIALECTS = {
    LIFECYCLE: Dialect(LIFECYCLE, INBOUND, "type", "requestId", LIFECYCLE_CODES, "bad_request", "invalid_json",
                       "unknown_action", "validation_error"),
    TASK: Dialect(TASK, ACTIONS, "action", "id", TASK_CODES, "BAD_REQUEST", "BAD_REQUEST", "UNKNOWN_ACTION",
                  "VALIDATION_ERROR"),
}  # fmt: skip


# ---------------------------------------------------------------- a blocking client for hypothesis


@contextmanager
def dial(url: str, dialect: str) -> Iterator[ClientConnection]:
    """A blocking client of one dialect on loopback, past the lifecycle dialect's greeting."""
    with ws_connect(url, subprotocols=[Subprotocol(dialect)], proxy=None, compression=None,
                    max_size=None, open_timeout=10, close_timeout=5) as ws:  # fmt: skip
        if dialect == LIFECYCLE:
            assert json.loads(ws.recv(timeout=ANSWER_WAIT))["type"] == "session_state"
        yield ws


@dataclass
class FuzzClient:
    """One connection for many examples; a new one after an example that lost it (which fails that example)."""

    url: str
    dialect: Dialect
    stack: ExitStack = field(default_factory=ExitStack)
    ws: ClientConnection | None = None

    def answer(self, probe: Probe) -> dict[str, Any]:
        """Sends the probe's frame and reads until its answer (events in between are skipped)."""
        if self.ws is None:
            self.ws = self.stack.enter_context(dial(self.url, self.dialect.name))
        try:
            self.ws.send(probe.text)
            deadline = time.monotonic() + ANSWER_WAIT
            while True:
                frame = json.loads(self.ws.recv(timeout=max(0.0, deadline - time.monotonic())))
                if self.dialect.is_answer(frame):
                    return dict(frame)
        except (ConnectionClosed, TimeoutError) as failed:
            self.close()
            raise AssertionError(f"{probe.label}: {probe.text[:200]!r} got no answer: {failed!r}") from None

    def close(self) -> None:
        self.ws = None
        self.stack.close()


def fuzz(url: str, dialect: Dialect, examples: int) -> tuple[Counter[str], Counter[str]]:
    """Codes of the answers, and the kinds sent in a valid shape."""
    client = FuzzClient(url, dialect)
    codes: Counter[str] = Counter()
    valid: Counter[str] = Counter()

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])  # fmt: skip
    @given(dialect.messages())
    def run(probe: Probe) -> None:
        codes[dialect.check(probe, client.answer(probe))] += 1
        if probe.codes is None:
            valid[probe.label] += 1

    # Every message in its plain valid shape first, then the generated ones.
    for probe in dialect.plain():
        run = example(probe)(run)
    try:
        run()
    finally:
        client.close()
    return codes, valid


async def test_generated_messages_get_typed_answers_and_spare_the_other_clients(
    stage: Stage, bystander: Bystander
) -> None:
    before = bystander.updates()
    for name, dialect in DIALECTS.items():
        codes, valid = await asyncio.to_thread(fuzz, stage.gateway.ws_url, dialect, EXAMPLES)
        # The generator reaches every message in a valid shape, the handlers' successes and their refusals.
        assert set(valid) == {f"valid {kind}" for kind in dialect.table}, (name, valid)
        assert codes["ok"] >= 5, (name, codes)
        assert {dialect.invalid, dialect.unknown, dialect.malformed, dialect.not_json} <= set(codes), (
            name,
            codes,
        )
        assert {"not_found", "agentctl_not_ready"} <= {c.lower() for c in codes}, (name, codes)
    # Prompts the fuzzing sent to the ready agent ran, and the bystander saw their turns.
    assert bystander.updates() > before
    await bystander.still_served(stage)
    await gateway_still_serves(stage)


# ---------------------------------------------------------------- frames that are not messages


@dataclass
class Outcome:
    answers: list[dict[str, Any]]
    close_code: int | None  # None: still open, and it answered a ping after the frame


def exchange(url: str, dialect: str, send: Callable[[ClientConnection], None], answers: int = 1) -> Outcome:
    """Sends what `send` sends, then reads `answers` answers or up to the close; an open connection must still
    answer a ping."""
    codec = DIALECTS[dialect]
    with dial(url, dialect) as ws:
        got: list[dict[str, Any]] = []
        try:
            send(ws)
            while len(got) < answers:
                frame = json.loads(ws.recv(timeout=ANSWER_WAIT))
                if codec.is_answer(frame):
                    got.append(frame)
            ping = codec.wrap("ping", {}, {}, "after")
            ws.send(json.dumps(ping))
            while not codec.is_answer(frame := json.loads(ws.recv(timeout=ANSWER_WAIT))):
                pass
            assert frame["type"] != "error", frame
            return Outcome(got, None)
        except ConnectionClosed as closed:
            # No close frame at all is what the protocol calls an abnormal closure.
            return Outcome(got, closed.rcvd.code if closed.rcvd else ABNORMAL_CLOSURE)


def close_code_after(url: str, send: Callable[[ClientProtocol], None], *, compression: bool = False) -> int:
    """Sends what `send` queues, then reads up to the end of the stream and returns the close code received.

    A server that refuses a frame while it is still arriving closes with unread data, so its kernel resets the
    connection and the client's send fails. A client that stops there (as `websockets`' own does) can miss a close
    frame it has already received; this one ignores the failed send and reads on.
    """
    extensions = [ClientPerMessageDeflateFactory()] if compression else []
    uri = parse_uri(url)
    protocol = ClientProtocol(uri, subprotocols=[Subprotocol(LIFECYCLE)], extensions=extensions,
                              max_size=None)  # fmt: skip
    with socket.create_connection((uri.host, uri.port), timeout=ANSWER_WAIT) as sock:
        protocol.send_request(protocol.connect())
        sock.sendall(b"".join(protocol.data_to_send()))
        while protocol.state is not State.OPEN:
            chunk = sock.recv(65536)
            assert chunk, "the gateway ended the connection during the handshake"
            protocol.receive_data(chunk)
        send(protocol)
        with suppress(OSError):
            sock.sendall(b"".join(protocol.data_to_send()))
        while protocol.close_rcvd is None:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            protocol.receive_data(chunk)
    return protocol.close_rcvd.code if protocol.close_rcvd else ABNORMAL_CLOSURE


def error_code(frame: dict[str, Any]) -> str:
    assert frame["type"] == "error", frame
    return str(frame["payload"]["code"])


def deeply_nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def test_frames_that_are_not_messages_get_a_typed_error_or_a_close_code(
    stage: Stage, bystander: Bystander
) -> None:
    url = stage.gateway.ws_url

    async def check(dialect: str, send: Callable[[ClientConnection], None]) -> Outcome:
        return await asyncio.to_thread(exchange, url, dialect, send)

    for dialect in (LIFECYCLE, TASK):
        malformed = DIALECTS[dialect].malformed
        # Binary frames, JSON or not: a typed error, and the connection stays open.
        for data in (b'{"type": "ping"}', os.urandom(64), b""):
            outcome = await check(dialect, sending(data))
            assert outcome.close_code is None
            assert error_code(outcome.answers[0]) == malformed
        # JSON nested deeper than the parser goes: a typed error, not a dropped connection.
        for text in (
            deeply_nested(100_000),
            '{"type": "ping", "id": "x", "payload": ' + deeply_nested(50_000) + "}",
        ):
            outcome = await check(dialect, sending(text))
            assert outcome.close_code is None
            assert error_code(outcome.answers[0]) == DIALECTS[dialect].not_json
    # Nested, but within what the parser takes: an ordinary request.
    shallow = json.dumps({"type": "ping", "requestId": "shallow", "x": json.loads(deeply_nested(200))})
    outcome = await check(LIFECYCLE, sending(shallow))
    assert outcome.answers[0] == {"type": "pong", "payload": {"requestId": "shallow"}}

    # What cannot be a message at all ends the connection with the close code that says why.
    too_big = b"x" * (MAX_CLIENT_FRAME + 1)

    def fragments(protocol: ClientProtocol) -> None:
        protocol.send_text(too_big[:65536], fin=False)
        for _ in range(16):
            protocol.send_continuation(too_big[:65536], fin=False)

    closes = {
        "text that is not UTF-8": (lambda p: p.send_text(b'{"type": "\xff\xfe"}'), False, 1007),
        "a lone surrogate's UTF-8": (lambda p: p.send_text(b'"\xed\xa0\x80"'), False, 1007),
        "a frame over the limit": (lambda p: p.send_text(too_big), False, 1009),
        "fragments over the limit": (fragments, False, 1009),
        "a compressed frame that inflates over the limit": (lambda p: p.send_text(too_big), True, 1009),
    }  # fmt: skip
    for what, (send, compression, code) in closes.items():
        got = await asyncio.to_thread(close_code_after, url, send, compression=compression)
        assert got == code, f"{what}: closed with {got}"
    await bystander.still_served(stage)
    await gateway_still_serves(stage)


# ---------------------------------------------------------------- floods

IN_FLIGHT = 16


async def flood(stage: Stage, frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sends `frames` back to back from a client that reads all the while; returns the answers, one per frame."""
    client = Client(await stage.http.ws_connect(stage.gateway.ws_url, protocols=(LIFECYCLE,)))
    try:
        await client.wait_for("session_state", lambda f: f["type"] == "session_state")
        mark = len(client.frames)
        for frame in frames:
            await client.send(frame)

        def answers() -> list[dict[str, Any]]:
            return [f for f in client.frames[mark:] if f["type"] in LIFECYCLE_ANSWERS]

        await wait_until(_true(lambda: len(answers()) >= len(frames)), f"{len(frames)} answers", within=60)
        assert client.closed_code is None
        return answers()
    finally:
        await client.close()


def _true(probe: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return probe()

    return check


def slow_consumers(gateway: GatewayProcess) -> float:
    with urllib.request.urlopen(gateway.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("agentsession_gateway_slow_consumers_total ")
    )


def flood_unread(gateway: GatewayProcess, frame: str) -> tuple[list[dict[str, Any]], int | None, int]:
    """Sends `frame` over and over without reading until the gateway counts a slow consumer, then reads what
    reached this client. Returns the answers, the close code, and how many frames were sent."""
    before = slow_consumers(gateway)
    answers: list[dict[str, Any]] = []
    with dial(gateway.ws_url, LIFECYCLE) as ws:
        for sent in range(1, 1001):
            ws.send(frame)
            if sent % 10 == 0 and slow_consumers(gateway) > before:
                break
        try:
            while True:
                answers.append(json.loads(ws.recv(timeout=ANSWER_WAIT)))
        except ConnectionClosed as closed:
            return answers, closed.rcvd.code if closed.rcvd else ABNORMAL_CLOSURE, sent
        except TimeoutError:
            return answers, None, sent


@pytest.mark.parametrize("gateway_args", [("--max-requests-in-flight", str(IN_FLIGHT), "--queue-size", "16")])
async def test_a_flooding_client_is_bounded_and_the_others_are_not_slowed(
    stage: Stage, bystander: Bystander
) -> None:
    # Quick requests sent back to back are all answered, in order: the bound counts what is still running.
    answers = await flood(stage, [{"type": "ping", "requestId": str(n)} for n in range(2000)])
    assert [(a["type"], a["payload"]["requestId"]) for a in answers] == [
        ("pong", str(n)) for n in range(2000)
    ]

    # Slow requests (each waits for a session that never gets ready) beyond the bound are refused at once.
    waits = [
        {"type": "initialize_agent_request", "agentId": STARTING, "requestId": str(n)} for n in range(300)
    ]
    answers = await flood(stage, waits)
    assert sorted(int(a["payload"]["requestId"]) for a in answers) == list(range(300))
    codes = Counter(error_code(a) for a in answers)
    assert set(codes) == {"timeout", "too_many_requests"}, codes
    assert codes["timeout"] >= IN_FLIGHT, codes
    refusal = next(a for a in answers if error_code(a) == "too_many_requests")
    assert str(IN_FLIGHT) in refusal["payload"]["message"]
    assert refusal["payload"]["requestType"] == "initialize_agent_request"

    # A client that sends and does not read is dropped as a slow consumer: once it reads again it finds what fit
    # in the pipes, the error, and the close code. Its requests get answers as big as themselves (an unknown
    # type is named in the error), so the pipes fill after a few dozen.
    big = json.dumps({"type": "x" * 200_000})
    answers, closed, sent = await asyncio.to_thread(flood_unread, stage.gateway, big)
    assert closed == CLOSE_SLOW_CONSUMER, (closed, sent, len(answers))
    assert error_code(answers[-1]) == "slow_consumer"
    assert {error_code(a) for a in answers[:-1]} == {"unknown_action"}
    await bystander.still_served(stage)
    await gateway_still_serves(stage)
