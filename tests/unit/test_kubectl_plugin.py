"""The kubectl plugin's pure parts: it runs as one copied file, picks the gateway that serves a namespace, reads
typed answers to permission requests, says a stop reason as an exit status, and renders a session's journal."""

from __future__ import annotations

import ast
import asyncio
import io
import sys
import zipfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentsession.api import constants
from agentsession.gateway import task_dialect
from agentsession.kubectl_plugin import (
    build,
    cli,
    client,
    conversation,
    credentials,
    discovery,
    errors,
    names,
    render,
)

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


def archived_modules(built: Path) -> dict[str, ast.Module]:
    """The modules in the built file by dotted name (a package by its own), parsed."""
    with zipfile.ZipFile(built) as archive:
        sources = {name: archive.read(name) for name in archive.namelist() if name.endswith(".py")}
    return {
        name.removesuffix(".py").removesuffix("/__init__").replace("/", "."): ast.parse(source)
        for name, source in sources.items()
    }


def test_the_file_imports_nothing_but_the_standard_library_aiohttp_and_kubernetes(tmp_path: Path) -> None:
    """So that copying it alone onto the PATH as kubectl-agentsession is a whole install: what the built file's
    modules import from the project, the file holds."""
    built = build.build(tmp_path / "kubectl-agentsession")
    modules = archived_modules(built)
    packages = {name.rpartition(".")[0] for name in modules} - {""}
    imported = set()
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, "relative import"
                module = node.module or ""
                # From a package, only its modules (its __init__ defines nothing else).
                if module in packages:
                    imported.update(f"{module}.{alias.name}" for alias in node.names)
                else:
                    imported.add(module)
    own = {name for name in imported if name.split(".")[0] == "agentsession"}
    assert own <= set(modules), f"imported but not in the file: {own - set(modules)}"
    assert {name.split(".")[0] for name in imported - own} - sys.stdlib_module_names == {
        "aiohttp",
        "kubernetes",
    }
    assert built.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert built.stat().st_mode & 0o111, "the file is executable"
    assert "__main__" in modules


def test_its_copies_of_the_projects_names_agree() -> None:
    assert (names.GROUP, names.VERSION, names.PLURAL) == (
        constants.GROUP,
        constants.VERSION,
        constants.PLURAL,
    )
    assert names.TASK_DIALECT == task_dialect.SUBPROTOCOL


def service(name: str, serves: tuple[str, ...], namespace: str = "system") -> discovery.GatewayService:
    return discovery.GatewayService(namespace, name, 80, serves)


@pytest.mark.parametrize(
    ("services", "chosen"),
    [
        ([service("all", ())], "all"),
        ([service("all", ()), service("team", ("team-a",))], "team"),
        ([service("globbed", ("team-*",)), service("other", ("ops",))], "globbed"),
    ],
)
def test_the_gateway_that_names_the_namespace_wins(
    services: list[discovery.GatewayService], chosen: str
) -> None:
    assert discovery.pick_gateway(services, "team-a").name == chosen


@pytest.mark.parametrize(
    ("services", "message"),
    [
        ([], "no AgentSession gateway serves namespace team-a (gateway Services: none)"),
        ([service("ops", ("ops",))], "gateway Services: system/ops (serves ops)"),
        ([service("a", ()), service("b", (), "other")], "several gateways serve namespace team-a: system/a"),
    ],
)
def test_no_gateway_or_several_say_what_to_do(services: list[discovery.GatewayService], message: str) -> None:
    with pytest.raises(errors.PluginError, match="--gateway") as refused:
        discovery.pick_gateway(services, "team-a")
    assert message in str(refused.value)


def test_a_services_annotation_says_which_namespaces_it_serves() -> None:
    body = {
        "metadata": {"namespace": "ops", "name": "rel-gateway",
                     "annotations": {names.NAMESPACES_ANNOTATION: '["a","b-*"]'}},
        "spec": {"ports": [{"name": "metrics", "port": 9}, {"name": "http", "port": 8080}]},
    }  # fmt: skip
    assert discovery.service_view(body) == discovery.GatewayService("ops", "rel-gateway", 8080, ("a", "b-*"))
    body["metadata"]["annotations"] = {}
    assert discovery.service_view(body).serves == ()


@pytest.mark.parametrize(
    ("typed", "url"),
    [
        ("127.0.0.1:8090", "ws://127.0.0.1:8090/ws"),
        ("http://127.0.0.1:8090/", "ws://127.0.0.1:8090/ws"),
        ("https://gw.example", "wss://gw.example/ws"),
        ("wss://gw.example/ws", "wss://gw.example/ws"),
    ],
)
def test_gateway_urls_as_people_type_them(typed: str, url: str) -> None:
    assert discovery.gateway_ws_url(typed) == url


@pytest.mark.parametrize(
    ("line", "option"),
    [("1\n", "allow"), ("3", "reject"), (" always ", "always"), ("Always allow", "always"), ("", None),
     ("cancel", None)],
)  # fmt: skip
def test_typed_answers_name_an_option(line: str, option: str | None) -> None:
    chosen = conversation.parse_answer(line, OPTIONS)
    assert (chosen["optionId"] if chosen else None) == option


@pytest.mark.parametrize("line", ["0", "4", "maybe"])
def test_other_answers_are_asked_again(line: str) -> None:
    with pytest.raises(ValueError, match="answer with 1-3, an option id, or an empty line to cancel"):
        conversation.parse_answer(line, OPTIONS)


def test_allow_and_reject_pick_the_first_option_of_their_kind() -> None:
    assert conversation.choose_option(OPTIONS, "allow") == OPTIONS[0]
    assert conversation.choose_option(OPTIONS, "reject") == OPTIONS[2]
    assert conversation.choose_option(OPTIONS[:2], "reject") is None


@pytest.mark.parametrize(
    ("stop_reason", "status"),
    [("end_turn", 0), ("max_tokens", 3), ("max_turn_requests", 4), ("refusal", 5), ("cancelled", 6),
     ("error", 7), ("something_new", 8), (None, 8)],
)  # fmt: skip
def test_the_exit_status_says_the_stop_reason(stop_reason: str | None, status: int) -> None:
    assert errors.exit_status(stop_reason) == status


def chunk(kind: str, text: str) -> dict[str, Any]:
    return {"sessionId": "s", "update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}}}


def test_the_transcript_runs_chunks_into_paragraphs_and_gives_the_rest_a_line() -> None:
    out = io.StringIO()
    transcript = render.Transcript(out)
    for kind, notification in [
        ("session_update", chunk("user_message_chunk", "Write it")),
        ("session_update", chunk("agent_thought_chunk", "Turn 1.")),
        ("session_update", {"update": {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "List",
                                       "status": "pending"}}),
        ("permission_request", {"pending_id": "p1", "tool_call": {"title": "Write demo.txt"}, "options": OPTIONS}),
        ("permission_resolved", {"pending_id": "p1", "outcome": {"outcome": "selected", "optionId": "allow"},
                                 "reason": "responded"}),
        ("session_update", chunk("agent_message_chunk", "Done ")),
        ("session_update", chunk("agent_message_chunk", "now.")),
        ("session_update", {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "code"}}),
        ("turn_end", {"sessionId": "s", "stopReason": "error", "error": "the agent exited"}),
        ("drain", {"outcome": "finished"}),
    ]:  # fmt: skip
        transcript.entry(kind, notification)
    assert out.getvalue().splitlines() == [
        "you: Write it",
        "thought: Turn 1.",
        "tool_call: List (pending)",
        "permission requested: Write demo.txt: [1] Allow (allow)  [2] Always allow (always)  [3] Reject (reject)",
        "permission: selected allow (responded)",
        "agent: Done now.",
        "current_mode_update: code",
        "[turn ended: error: the agent exited]",
        '[drain: {"outcome": "finished"}]',
    ]


@pytest.mark.parametrize(
    ("notification", "expected"),
    [
        (chunk("agent_message_chunk", "Hi"), ("agent_message_chunk", "Hi")),
        (
            {
                "update": {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "c1",
                    "title": "List",
                    "status": "pending",
                }
            },
            ("tool_call", "List (pending)"),
        ),
        (
            {"update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}},
            ("tool_call_update", "c1 (completed)"),
        ),
        (
            {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "code"}},
            ("current_mode_update", "code"),
        ),
        ({"update": {"sessionUpdate": "plan", "entries": []}}, ("plan", None)),
    ],
)
def test_updates_are_described_in_a_few_words(
    notification: dict[str, Any], expected: tuple[str, str | None]
) -> None:
    assert render.describe_update(notification) == expected


def test_usage_errors_exit_2_and_every_command_takes_the_kubectl_flags() -> None:
    with pytest.raises(SystemExit) as usage:
        cli.run(["prompt", "only-a-name"])
    assert usage.value.code == errors.EXIT_USAGE
    parser = cli.parser()
    for command in ("attach", "history", "shell", "suspend", "resume"):
        args = parser.parse_args([command, "demo", "-n", "ns", "--context", "c", "--kubeconfig", "k"])
        assert (args.name, args.namespace, args.context, args.kubeconfig) == ("demo", "ns", "c", "k")


# ---------------------------------------------------------------- which token, over what


class FakeCluster(credentials.Cluster):
    """The kubeconfig's side of token handling, recorded: who the user is, its own token, the tokens requested."""

    def __init__(
        self, username: str | Exception = "alice", own_token: str | None = "kubeconfig-token"
    ) -> None:
        super().__init__(None, None)
        self.user = username
        self.own_token = own_token
        self.requested: list[tuple[str, str, str]] = []
        self.own_token_read = False

    def username(self) -> str:
        if isinstance(self.user, Exception):
            raise self.user
        return self.user

    def bearer_token(self) -> str | None:
        self.own_token_read = True
        return self.own_token

    def request_token(
        self, service_account: str, namespace: str, audience: str, seconds: int = credentials.TOKEN_SECONDS
    ) -> str:
        self.requested.append((service_account, namespace, audience))
        return f"minted-for-{service_account}"


def target(
    cluster: credentials.Cluster, gateway: str | None = "ws://127.0.0.1:8090/ws", **kw: Any
) -> credentials.Target:
    fields: dict[str, Any] = {"token": None, "service_account": None, **kw}
    return credentials.Target(cluster, "team", "demo", gateway, None, **fields)


def test_a_service_account_gets_a_token_for_the_gateways_audience_only() -> None:
    cluster = FakeCluster()
    assert target(cluster, service_account="ops/bot").resolve_token() == "minted-for-ops/bot"
    assert cluster.requested == [("ops/bot", "team", "agentsession-gateway")]
    assert not cluster.own_token_read


def test_a_kubeconfig_user_that_is_a_service_account_gets_one_of_its_own() -> None:
    cluster = FakeCluster("system:serviceaccount:team:dev")
    token = target(cluster, token_audience="gw.example").resolve_token()
    assert token == "minted-for-team/dev"
    assert cluster.requested == [("team/dev", "team", "gw.example")]
    assert not cluster.own_token_read, "the kubeconfig's own token was read"


def test_any_other_kubeconfig_user_is_told_what_to_give_and_its_token_is_not_sent() -> None:
    cluster = FakeCluster("alice@example.com")
    with pytest.raises(errors.PluginError) as refused:
        target(cluster).resolve_token()
    message = str(refused.value)
    assert "(alice@example.com) is not a ServiceAccount" in message
    for option in ("--service-account", "--token", "--send-kubeconfig-token"):
        assert option in message
    assert not cluster.own_token_read
    assert not cluster.requested


def test_the_kubeconfigs_own_token_goes_only_when_asked_for() -> None:
    cluster = FakeCluster("alice")
    assert target(cluster, send_kubeconfig_token=True).resolve_token() == "kubeconfig-token"
    with pytest.raises(errors.PluginError, match="has no bearer token"):
        target(FakeCluster(own_token=None), send_kubeconfig_token=True).resolve_token()
    # A token given wins over everything, and needs no kubeconfig at all.
    given = FakeCluster(errors.NoKubeconfig("cannot load the kubeconfig"))
    assert target(given, token="given").resolve_token() == "given"
    assert not given.own_token_read
    assert not given.requested


def test_without_a_kubeconfig_a_named_gateway_is_tried_without_a_token() -> None:
    """A gateway in dev mode needs none; without --gateway the kubeconfig is needed to find it anyway."""
    missing = errors.NoKubeconfig("cannot load the kubeconfig ~/.kube/config: not found")
    assert target(FakeCluster(missing)).resolve_token() is None
    with pytest.raises(errors.NoKubeconfig):
        target(FakeCluster(missing), gateway=None).resolve_token()


@pytest.mark.parametrize(
    "url", ["ws://127.0.0.1:8090/ws", "ws://127.9.0.1/ws", "ws://localhost:1/ws", "ws://[::1]:8090/ws",
            "wss://gateway.example/ws"],
)  # fmt: skip
def test_tokens_go_over_tls_or_to_this_machine(url: str) -> None:
    credentials.check_transport(url, insecure=False)


@pytest.mark.parametrize(
    "url", ["ws://gateway.example/ws", "ws://10.0.0.7:8090/ws", "ws://localhost.evil.example/ws",
            "ws://127.0.0.1.nip.io/ws", "http://gateway.example/ws"],
)  # fmt: skip
def test_plain_ws_to_another_machine_needs_insecure(url: str) -> None:
    with pytest.raises(errors.PluginError, match="--insecure") as refused:
        credentials.check_transport(url, insecure=False)
    assert "not encrypted" in str(refused.value)
    credentials.check_transport(url, insecure=True)


async def test_a_plain_ws_gateway_elsewhere_is_refused_before_any_token_is_made() -> None:
    cluster = FakeCluster("system:serviceaccount:team:dev")
    with pytest.raises(errors.PluginError, match="--insecure"):
        async with client.open_session(target(cluster, gateway="gateway.example:8090"), asyncio.Queue()):
            pass
    assert not cluster.requested
    assert not cluster.own_token_read


async def test_the_gateways_reason_for_ending_the_connection_is_said() -> None:
    """A revoked or expired token: the gateway sends a typed error, then closes; the person reads the error."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    async def ending(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        error = {"code": "UNAUTHORIZED", "message": "your token expired; connect again with a new one"}
        await ws.send_json({"id": "x", "type": "error", "action": "", "payload": error})
        await ws.close(code=4001, message=b"token expired")
        return ws

    app = web.Application()
    app.router.add_get("/ws", ending)
    async with TestServer(app) as server, aiohttp.ClientSession() as http:
        inbox: asyncio.Queue[client.Event] = asyncio.Queue()
        task = client.TaskClient(await http.ws_connect(server.make_url("/ws")), inbox)
        assert await asyncio.wait_for(inbox.get(), 10) == (
            "closed",
            "the gateway ended the connection: UNAUTHORIZED: your token expired; connect again with a new one "
            "(code 4001)",
        )
        await task.close()


def _metered(phase: str, usage: dict[str, Any] | None, exhausted: str | None) -> dict[str, Any]:
    conditions = [{"type": "BudgetExhausted", "status": "True" if exhausted else "False",
                   "reason": "Exhausted" if exhausted else "WithinBudget", "message": exhausted or ""}]  # fmt: skip
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if usage is not None:
        status["usage"] = usage
    return {"metadata": {"namespace": "ns", "name": phase.lower()}, "spec": {"agent": {"type": "codex"}},
            "status": status}  # fmt: skip


def test_get_rows_count_every_token_a_budget_counts() -> None:
    usage = {"inputTokens": 10, "cachedTokens": 100, "outputTokens": 1, "requests": 2, "costUSD": "0.5"}
    rows = render.session_rows([_metered("Ready", usage, "2 model requests reached the budget of 2"),
                                _metered("Pending", None, None)])  # fmt: skip
    assert rows == [
        ["NAME", "PHASE", "AGENT", "REQUESTS", "TOKENS", "COST", "BUDGET"],
        ["pending", "Pending", "codex", "0", "0", "$0", "ok"],
        ["ready", "Ready", "codex", "2", "111", "$0.5", "exhausted"],
    ]
    lines = render.table(rows).splitlines()
    assert [line.split() for line in lines] == rows
    assert len({line.index("$") for line in lines[1:]}) == 1, "columns line up"
    assert render.session_rows([{"metadata": {"name": "new"}}])[1][1] == "<none>"


def test_status_lines_say_usage_limits_and_why_the_budget_is_spent() -> None:
    body = _metered(
        "Ready", {"inputTokens": 7, "requests": 1, "costUSD": "0.01"}, "a cost of $0.01 reached it"
    )
    body["spec"]["budget"] = {"maxCostUSD": "0.01", "maxTokens": 500}
    text = "\n".join(render.describe_session(body))
    assert "Tokens:         7" in text
    assert "Limits:         500 tokens, 0.01 USD (spec.budget" in text
    assert "Exhausted:      yes: a cost of $0.01 reached it; raise spec.budget to go on" in text
    within = "\n".join(render.describe_session(_metered("Ready", None, None)))
    assert "Exhausted:      no" in within
    assert "Limits:         the namespace's or the chart's" in within
