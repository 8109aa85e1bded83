#!/usr/bin/env python3
"""kubectl agentsession: drive AgentSessions from a terminal, through the AgentSession gateway.

    kubectl agentsession attach NAME          live updates; a line you type is a prompt; permissions asked inline
    kubectl agentsession prompt NAME TEXT     one turn, printed; the exit status says how the turn ended
    kubectl agentsession history NAME         everything the session said and did
    kubectl agentsession shell NAME           a terminal in the session's workspace
    kubectl agentsession suspend NAME         set spec.suspend (with your kubeconfig); `resume` unsets it
    kubectl agentsession get [NAME]           sessions with their phase, model requests, tokens and cost
    kubectl agentsession status NAME          one session: conditions, usage and budget (`describe` too)

Where the gateway is: --gateway URL, else the chart's gateway Service that serves the session's namespace, reached
through `kubectl port-forward` on a free loopback port for as long as the command runs.

Who you are to the gateway: --token (or $AGENTSESSION_TOKEN); else a token for the gateway's audience
(`agentsession-gateway`, --token-audience) requested with TokenRequest for --service-account, or for your
kubeconfig's user when it is a ServiceAccount. Your kubeconfig's own token, good for the whole Kubernetes API, is
sent only with --send-kubeconfig-token. A gateway reached over plain ws:// must be on this machine (loopback),
unless you pass --insecure.

Exit status of `prompt`: 0 end_turn, 3 max_tokens, 4 max_turn_requests, 5 refusal, 6 cancelled, 7 error (the
turn failed), 8 another stop reason. Every command: 1 when it could not do what was asked (the message says why),
2 for a usage error, 130 when interrupted.

This file needs only Python 3.11+, aiohttp and the kubernetes client (the project's dependencies): installed with
the project it is the `kubectl-agentsession` command; copied alone onto the PATH under that name and made
executable, it works the same.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import fnmatch
import ipaddress
import json
import os
import re
import shutil
import signal
import sys
import termios
import threading
import time
import tty
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp

# The same values as agentsession.api.constants and the gateway's task dialect; repeated because this file must
# run alone (a unit test keeps them equal).
GROUP = "agentsession.dev"
VERSION = "v1alpha1"
PLURAL = "agentsessions"
TASK_DIALECT = "task-session.v1"
# The largest message taken from the gateway: a page of history holds up to 4 MiB of entries.
MAX_FRAME = 16 * 1024 * 1024
# The chart labels its gateway Service so, and says in an annotation which namespaces the gateway serves.
GATEWAY_SELECTOR = "app.kubernetes.io/name=agentsession,app.kubernetes.io/component=gateway"
NAMESPACES_ANNOTATION = "agentsession.dev/namespaces"
# The audience the chart's gateway takes tokens for (its `gateway.auth.audiences`).
GATEWAY_AUDIENCE = "agentsession-gateway"
TOKEN_SECONDS = 3600  # the tokens this plugin requests; the gateway closes the connection when they expire
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
STOP_REASON_EXIT = {
    "end_turn": 0,
    "max_tokens": 3,
    "max_turn_requests": 4,
    "refusal": 5,
    "cancelled": 6,
    "error": 7,
}
EXIT_OTHER_STOP = 8

ATTACH_HELP = (
    "Type a prompt and Enter. /cancel stops the turn, /mode ID changes the mode, /quit (or Ctrl-D) leaves."
)


class PluginError(Exception):
    """What went wrong, said for the person at the terminal; the command exits with EXIT_FAILED."""


class NoKubeconfig(PluginError):
    """The kubeconfig could not be loaded."""


def exit_status(stop_reason: str | None) -> int:
    return STOP_REASON_EXIT.get(stop_reason or "", EXIT_OTHER_STOP)


# ---------------------------------------------------------------- rendering (the demo client's as well)


def describe_update(notification: dict[str, Any]) -> tuple[str, str | None]:
    """(kind, text) of an ACP session/update notification: the text of a chunk, or a short summary."""
    update = notification.get("update", notification)
    kind = update.get("sessionUpdate") or update.get("session_update") or "update"
    if kind in ("agent_message_chunk", "user_message_chunk", "agent_thought_chunk"):
        content = update.get("content") or {}
        return kind, content.get("text", "")
    if kind in ("tool_call", "tool_call_update"):
        title = update.get("title") or update.get("toolCallId", "")
        return kind, f"{title} ({update.get('status', '')})"
    if kind == "current_mode_update":
        return kind, update.get("currentModeId") or update.get("modeId")
    return kind, None


def choose_option(options: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    """The first permission option of a kind: "allow" matches allow_once and allow_always."""
    return next((o for o in options if str(o.get("kind", "")).startswith(kind)), None)


def parse_answer(line: str, options: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The option a typed answer names (its number, id or name), or None for a cancel; ValueError otherwise."""
    text = line.strip()
    if text.lower() in ("", "cancel"):
        return None
    if text.isdigit() and 1 <= int(text) <= len(options):
        return options[int(text) - 1]
    for option in options:
        if text.lower() in (str(option.get("optionId", "")).lower(), str(option.get("name", "")).lower()):
            return option
    raise ValueError(f"answer with 1-{len(options)}, an option id, or an empty line to cancel")


_CHUNK_LABELS = {
    "user_message_chunk": "you",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}


class Transcript:
    """A session's journal as a person reads it: a message's chunks run on in one paragraph as they arrive, and
    everything else takes a line of its own."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._open: str | None = None  # the chunk kind whose paragraph is being written

    def entry(self, kind: str, notification: dict[str, Any]) -> None:
        """One journal entry (`kind` as agentctl journals it: session_update, permission_request, ...)."""
        if kind == "session_update":
            what, text = describe_update(notification)
            if what in _CHUNK_LABELS:
                self._chunk(what, text or "")
            else:
                self.line(f"{what}: {text}" if text else what)
        elif kind == "permission_request":
            self.line(permission_question(notification))
        elif kind == "permission_resolved":
            self.line(
                f"permission: {describe_outcome(notification.get('outcome'))} ({notification.get('reason')})"
            )
        elif kind == "turn_end":
            error = notification.get("error")
            self.line(f"[turn ended: {notification.get('stopReason')}" + (f": {error}]" if error else "]"))
        elif kind == "agent_error":
            self.line(f"[agent error: {notification.get('message') or notification}]")
        else:
            self.line(f"[{kind}: {json.dumps(notification, sort_keys=True)}]")

    def _chunk(self, kind: str, text: str) -> None:
        if self._open != kind:
            self.end_paragraph()
            self.out.write(f"{_CHUNK_LABELS[kind]}: ")
            self._open = kind
        self.out.write(text)
        self.out.flush()

    def end_paragraph(self) -> None:
        if self._open is not None:
            self.out.write("\n")
            self._open = None

    def line(self, text: str) -> None:
        self.end_paragraph()
        self.out.write(text + "\n")
        self.out.flush()


def permission_question(pending: dict[str, Any]) -> str:
    title = (pending.get("tool_call") or {}).get("title") or "a tool call"
    options = pending.get("options") or []
    choices = "  ".join(
        f"[{i}] {o.get('name') or o.get('optionId')} ({o.get('optionId')})" for i, o in enumerate(options, 1)
    )
    return f"permission requested: {title}: {choices}"


def describe_outcome(outcome: Any) -> str:
    if isinstance(outcome, dict):
        if outcome.get("outcome") == "selected":
            return f"selected {outcome.get('optionId')}"
        return str(outcome.get("outcome"))
    return str(outcome)


# ---------------------------------------------------------------- the cluster: kubeconfig, tokens, the Service


class Cluster:
    """The user's kubeconfig and context; its client is made on first use, so --gateway with --token needs none."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self._api: Any = None

    def api(self) -> Any:
        if self._api is None:
            from kubernetes import config

            try:
                self._api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=self.kubeconfig, context=self.context
                )
            except Exception as exc:  # the client raises ConfigException, OSError, YAML errors, ...
                where = self.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
                raise NoKubeconfig(f"cannot load the kubeconfig {where}: {exc}") from exc
        return self._api

    def namespace(self) -> str:
        """The namespace of the context, as kubectl takes it when -n is not given."""
        from kubernetes import config

        try:
            contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=self.kubeconfig
            )
        except Exception:  # no kubeconfig at all: kubectl's default
            return "default"
        chosen = next((c for c in contexts if c["name"] == self.context), None) if self.context else active
        return str(((chosen or {}).get("context") or {}).get("namespace") or "default")

    def bearer_token(self) -> str | None:
        """The kubeconfig user's bearer token (a static token, or one an exec or auth provider gave)."""
        value = self.api().configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        if not value:
            return None
        scheme, _, token = str(value).partition(" ")
        return token if scheme.lower() == "bearer" else str(value)

    def username(self) -> str:
        """Who the API server takes the kubeconfig's user for (SelfSubjectReview, as `kubectl auth whoami`)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            review = client.AuthenticationV1Api(self.api()).create_self_subject_review(
                client.V1SelfSubjectReview()
            )
        except ApiException as exc:
            raise PluginError(
                f"cannot ask the API server who your kubeconfig's user is ({exc.status} {exc.reason}); "
                "give --service-account NAME or --token"
            ) from exc
        user = review.status.user_info if review.status else None
        return str(user.username) if user and user.username else ""

    def request_token(
        self, service_account: str, namespace: str, audience: str, seconds: int = TOKEN_SECONDS
    ) -> str:
        """A token for `[NAMESPACE/]NAME` and `audience` through the TokenRequest API (`kubectl create token`)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        account_ns, _, name = service_account.rpartition("/")
        account_ns = account_ns or namespace
        try:
            result = client.CoreV1Api(self.api()).create_namespaced_service_account_token(
                name,
                account_ns,
                client.AuthenticationV1TokenRequest(
                    spec=client.V1TokenRequestSpec(audiences=[audience], expiration_seconds=seconds)
                ),
            )
        except ApiException as exc:
            raise PluginError(
                f"cannot get a token for ServiceAccount {account_ns}/{name}: {exc.status} {exc.reason} "
                f"(you need 'create' on serviceaccounts/token in {account_ns}, and the account must exist)"
            ) from exc
        if result.status is None:
            raise PluginError(f"the API server gave no token for ServiceAccount {account_ns}/{name}")
        return str(result.status.token)

    def kubectl_args(self) -> list[str]:
        args = []
        if self.kubeconfig:
            args += ["--kubeconfig", self.kubeconfig]
        if self.context:
            args += ["--context", self.context]
        return args


@dataclass(frozen=True)
class GatewayService:
    namespace: str
    name: str
    port: int
    serves: tuple[str, ...]  # namespaces or globs; empty: every namespace

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def service_view(service: dict[str, Any]) -> GatewayService:
    meta = service["metadata"]
    ports = service["spec"].get("ports") or [{}]
    port = next((p for p in ports if p.get("name") == "http"), ports[0]).get("port", 80)
    try:
        serves = tuple(
            str(ns) for ns in json.loads((meta.get("annotations") or {}).get(NAMESPACES_ANNOTATION, "[]"))
        )
    except ValueError:
        serves = ()
    return GatewayService(meta["namespace"], meta["name"], int(port), serves)


def pick_gateway(services: list[GatewayService], namespace: str) -> GatewayService:
    """The gateway that serves `namespace`: one that names it beats one that serves every namespace."""
    serving = [
        s for s in services if not s.serves or any(fnmatch.fnmatchcase(namespace, p) for p in s.serves)
    ]
    named = [s for s in serving if s.serves]
    chosen = named or serving
    if len(chosen) == 1:
        return chosen[0]
    found = ", ".join(f"{s} (serves {', '.join(s.serves) or 'every namespace'})" for s in services) or "none"
    if not chosen:
        raise PluginError(
            f"no AgentSession gateway serves namespace {namespace} (gateway Services: {found}); "
            "install the chart for it, or give --gateway URL"
        )
    raise PluginError(
        f"several gateways serve namespace {namespace}: {found}; choose one with --gateway-service NAMESPACE/NAME"
    )


def find_gateway(cluster: Cluster, namespace: str, named: str | None) -> GatewayService:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(cluster.api())
    try:
        if named:
            service_ns, _, name = named.rpartition("/")
            found = core.read_namespaced_service(name, service_ns or namespace)
            return service_view(cluster.api().sanitize_for_serialization(found))
        items = core.list_service_for_all_namespaces(label_selector=GATEWAY_SELECTOR).items
    except ApiException as exc:
        if named:
            raise PluginError(f"cannot read the gateway Service {named}: {exc.status} {exc.reason}") from exc
        raise PluginError(
            f"cannot list Services to find the gateway ({exc.status} {exc.reason}); name it with "
            "--gateway-service NAMESPACE/NAME (the chart's is <release>-gateway in the release namespace) "
            "or give --gateway URL"
        ) from exc
    return pick_gateway([service_view(cluster.api().sanitize_for_serialization(s)) for s in items], namespace)


@contextlib.asynccontextmanager
async def port_forward(cluster: Cluster, service: GatewayService, within: float = 30.0) -> AsyncIterator[str]:
    """`kubectl port-forward` to the Service on a free loopback port while the block runs; yields the ws URL."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise PluginError(
            "kubectl is not on the PATH: it forwards a port to the gateway (or give --gateway URL)"
        )
    command = [kubectl, *cluster.kubectl_args(), "-n", service.namespace, "port-forward", "--address",
               "127.0.0.1", f"svc/{service.name}", f":{service.port}"]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        port = await _forwarded_port(proc.stdout, service, within)
        # kubectl goes on writing a line per connection; its pipe must not fill up.
        drain = asyncio.create_task(_discard(proc.stdout))
        try:
            await wait_ready(f"http://127.0.0.1:{port}", within)
            yield f"ws://127.0.0.1:{port}/ws"
        finally:
            drain.cancel()
    finally:
        if proc.returncode is None:
            proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5)


async def _forwarded_port(stdout: asyncio.StreamReader, service: GatewayService, within: float) -> int:
    said: list[str] = []
    try:
        async with asyncio.timeout(within):
            while raw := await stdout.readline():
                line = raw.decode(errors="replace").strip()
                said.append(line)
                if found := re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line):
                    return int(found.group(1))
    except TimeoutError:
        raise PluginError(f"kubectl port-forward to {service} said nothing within {within:.0f}s") from None
    raise PluginError(f"kubectl port-forward to {service} ended: {' '.join(said)[-500:]}")


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def wait_ready(base: str, within: float) -> None:
    """Until the gateway answers /readyz (it has loaded the AgentSessions)."""
    deadline = time.monotonic() + within
    last = "no answer"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(f"{base}/readyz") as resp:
                    if resp.status == 200:
                        return
                    last = f"/readyz answered {resp.status}"
            except (aiohttp.ClientError, OSError) as exc:
                last = str(exc) or type(exc).__name__
            await asyncio.sleep(0.2)
    raise PluginError(f"the gateway at {base} is not ready: {last}")


def gateway_ws_url(value: str) -> str:
    """ws(s)://HOST:PORT/ws from what a person types: a host:port, an http(s) or ws(s) URL, with or without /ws."""
    url = value.rstrip("/")
    if "://" not in url:
        url = f"ws://{url}"
    scheme, rest = url.split("://", 1)
    scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    if "/" not in rest:
        rest += "/ws"
    return f"{scheme}://{rest}"


def is_loopback(host: str) -> bool:
    name = host.lower().strip("[]")
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_transport(url: str, insecure: bool) -> None:
    """Refuses to send a token over plain ws:// to another machine, where anyone on the way could read it."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "wss" or insecure or (parsed.scheme == "ws" and is_loopback(parsed.hostname or "")):
        return
    raise PluginError(
        f"{url} is not encrypted: your token would cross the network in the clear. Use the gateway's https:// "
        "(wss://) address, leave out --gateway to reach it through a port-forward, or pass --insecure if you "
        "accept that"
    )


# ---------------------------------------------------------------- the gateway's task-session.v1 dialect


def bearer_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def ws_connect(
    http: aiohttp.ClientSession, url: str, token: str | None, dialect: str
) -> aiohttp.ClientWebSocketResponse:
    """A WebSocket to the gateway; a refusal (401, 403, 503) becomes a PluginError with the gateway's reason."""
    headers = bearer_headers(token)
    try:
        return await http.ws_connect(
            url, protocols=[dialect], headers=headers, heartbeat=20, max_msg_size=MAX_FRAME
        )
    except aiohttp.WSServerHandshakeError as exc:
        # The gateway refuses before the upgrade with a JSON body; a plain GET with the same token reads it.
        reason = exc.message
        with contextlib.suppress(aiohttp.ClientError, OSError, ValueError):
            async with http.get(url.replace("ws", "http", 1), headers=headers) as resp:
                reason = (await resp.json(content_type=None)).get("message", reason)
        hint = ""
        if exc.status == 401 and not token:
            hint = "; the gateway needs a token: give --service-account NAME or --token"
        raise PluginError(
            f"the gateway at {url} refused the connection ({exc.status}): {reason}{hint}"
        ) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise PluginError(f"cannot reach the gateway at {url}: {exc}") from exc


class GatewayError(PluginError):
    def __init__(self, action: str, code: str, message: str) -> None:
        super().__init__(f"{action} failed: {code}: {message}")
        self.code = code


# ("notification", frame) | ("closed", reason) | ("input", text, or None at its end) | ("interrupt", count)
Event = tuple[str, Any]


class TaskClient:
    """Requests answered by id; notifications go to the inbox in the order they came, with stdin and signals."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, inbox: asyncio.Queue[Event]) -> None:
        self.ws = ws
        self.inbox = inbox
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def request(self, action: str, /, *, ident: str | None = None, **payload: Any) -> dict[str, Any]:
        """The answer's payload; `ident` is the request's id (default: a new one)."""
        request_id = ident or uuid.uuid4().hex
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        try:
            await self.ws.send_json(
                {"id": request_id, "type": "request", "action": action, "payload": payload}
            )
            return await answer
        finally:
            self._waiting.pop(request_id, None)

    async def _read(self) -> None:
        reason = "the gateway closed the connection"
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                answer = self._waiting.get(str(frame.get("id")))
                if frame.get("type") == "response" and answer is not None:
                    answer.set_result(frame.get("payload") or {})
                elif frame.get("type") == "error" and answer is not None:
                    error = frame.get("payload") or {}
                    answer.set_exception(
                        GatewayError(
                            str(frame.get("action")), str(error.get("code")), str(error.get("message"))
                        )
                    )
                elif frame.get("type") == "notification":
                    self.inbox.put_nowait(("notification", frame))
                elif frame.get("type") == "error":
                    # An error of no request: why the gateway is ending the connection (a token revoked or expired).
                    error = frame.get("payload") or {}
                    reason = f"the gateway ended the connection: {error.get('code')}: {error.get('message')}"
            if self.ws.close_code not in (None, aiohttp.WSCloseCode.OK):
                reason += f" (code {self.ws.close_code})"
        finally:
            for answer in self._waiting.values():
                if not answer.done():
                    answer.set_exception(PluginError(reason))
            self.inbox.put_nowait(("closed", reason))

    async def close(self) -> None:
        self._reader.cancel()
        await self.ws.close()


def history_page(notification: dict[str, Any], request_id: str) -> dict[str, Any] | None:
    """The payload of a `task.history` notification that goes on with the history `task.start` `request_id`
    answered with (`updates`, and `next`: null on the last page); None for any other notification."""
    payload = notification.get("payload") or {}
    if notification.get("action") != "task.history" or payload.get("request_id") != request_id:
        return None
    return dict(payload)


async def start_task(client: TaskClient, agent_id: str) -> tuple[dict[str, Any], str]:
    """`task.start`: its answer (the session's info and the first page of its history) and the request's id,
    which the following pages name."""
    request_id = uuid.uuid4().hex
    return await client.request("task.start", ident=request_id, task_id=agent_id), request_id


@dataclass(frozen=True)
class Target:
    """Which session, and how to reach and authenticate to its gateway."""

    cluster: Cluster
    namespace: str
    name: str
    gateway: str | None
    gateway_service: str | None
    token: str | None
    service_account: str | None
    token_audience: str = GATEWAY_AUDIENCE
    send_kubeconfig_token: bool = False
    insecure: bool = False

    @property
    def agent_id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def resolve_token(self) -> str | None:
        """The token to present: given, or one for the gateway's audience only, never the kubeconfig's own
        unless asked (`--send-kubeconfig-token`): that one opens the whole Kubernetes API to whoever gets it."""
        if self.token:
            return self.token
        if self.service_account:
            return self.cluster.request_token(self.service_account, self.namespace, self.token_audience)
        try:
            if self.send_kubeconfig_token:
                token = self.cluster.bearer_token()
                if token is None:
                    raise PluginError("--send-kubeconfig-token: your kubeconfig's user has no bearer token")
                return token
            username = self.cluster.username()
        except NoKubeconfig:
            if self.gateway:
                return None  # no kubeconfig at hand: a gateway in dev mode needs no token
            raise
        account_ns, _, name = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        if not username.startswith(SERVICE_ACCOUNT_PREFIX) or not name:
            raise PluginError(
                f"your kubeconfig's user ({username or 'anonymous'}) is not a ServiceAccount, so this plugin cannot "
                f"get it a token for the gateway alone (audience {self.token_audience}). Give --service-account "
                "[NAMESPACE/]NAME (a ServiceAccount you may create tokens for), or --token TOKEN; "
                "--send-kubeconfig-token sends your kubeconfig's own token instead, which is good for the whole "
                "Kubernetes API: only to a gateway you trust"
            )
        return self.cluster.request_token(f"{account_ns}/{name}", self.namespace, self.token_audience)


@contextlib.asynccontextmanager
async def gateway_url(target: Target) -> AsyncIterator[str]:
    if target.gateway:
        yield gateway_ws_url(target.gateway)
        return
    # The port-forward's end is on loopback: the token never crosses the network in the clear.
    service = await asyncio.to_thread(find_gateway, target.cluster, target.namespace, target.gateway_service)
    async with port_forward(target.cluster, service) as url:
        yield url


@contextlib.asynccontextmanager
async def open_session(target: Target, inbox: asyncio.Queue[Event]) -> AsyncIterator[TaskClient]:
    if target.gateway:
        check_transport(gateway_ws_url(target.gateway), target.insecure)
    token = await asyncio.to_thread(target.resolve_token)
    async with gateway_url(target) as url, aiohttp.ClientSession() as http:
        client = TaskClient(await ws_connect(http, url, token, TASK_DIALECT), inbox)
        try:
            yield client
        finally:
            await client.close()


# ---------------------------------------------------------------- the terminal: stdin and signals


class StdinPump:
    """Puts what stdin gives into the inbox as ("input", text), and ("input", None) at its end.

    A daemon thread reads, so a read that blocks never holds up the exit.
    """

    def __init__(self, inbox: asyncio.Queue[Event], read: Callable[[], str]) -> None:
        loop = asyncio.get_running_loop()

        def pump() -> None:
            while True:
                try:
                    text = read()
                except (OSError, ValueError):
                    text = ""
                loop.call_soon_threadsafe(inbox.put_nowait, ("input", text or None))
                if not text:
                    return

        threading.Thread(target=pump, name="stdin", daemon=True).start()


def read_line() -> str:
    return sys.stdin.readline()


def read_keys() -> Callable[[], str]:
    """Bytes as they are typed, decoded as UTF-8 across reads."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd = sys.stdin.fileno()

    def read() -> str:
        while True:
            data = os.read(fd, 4096)
            if not data:
                return ""
            if text := decoder.decode(data):
                return text

    return read


@contextlib.contextmanager
def interrupts(inbox: asyncio.Queue[Event]) -> Iterator[None]:
    """Ctrl-C becomes an ("interrupt", count) event instead of a KeyboardInterrupt; SIGTERM counts as a second one
    (leave now), so the port-forward is stopped on the way out."""
    loop = asyncio.get_running_loop()
    count = 0

    def on_signal(leave: bool) -> None:
        nonlocal count
        count = max(count + 1, 2 if leave else 1)
        inbox.put_nowait(("interrupt", count))

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig == signal.SIGTERM)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


@contextlib.contextmanager
def raw_terminal() -> Iterator[None]:
    """Keys go to the remote shell as typed (Ctrl-C too) while a terminal is attached; restored afterwards."""
    if not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


# ---------------------------------------------------------------- commands


@dataclass
class Conversation:
    """What `attach` and `prompt` share: the journal shown, who is asked about permissions, whether a turn runs."""

    client: TaskClient
    agent_id: str
    transcript: Transcript
    answer: str  # ask | allow | reject | cancel
    turn_running: bool = False
    # Permission requests waiting for a typed answer, oldest first: pending id → options.
    asked: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stdin_ended: bool = False
    start_id: str = ""  # the task.start whose history pages are still coming; "" once it has all come

    async def start(self) -> dict[str, Any]:
        started, request_id = await start_task(self.client, self.agent_id)
        self.turn_running = (started.get("info") or {}).get("status") == "processing"
        self.start_id = request_id if started.get("next") is not None else ""
        return started

    def history_page(self, notification: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The entries of a page of the history that came after `start`'s answer; None if it is not one."""
        page = history_page(notification, self.start_id) if self.start_id else None
        if page is None:
            return None
        if page.get("next") is None:
            self.start_id = ""
        return list(page.get("updates") or [])

    async def on_update(self, kind: str, notification: dict[str, Any]) -> None:
        self.transcript.entry(kind, notification)
        if kind == "session_update" and describe_update(notification)[0] == "user_message_chunk":
            self.turn_running = True
        elif kind == "turn_end":
            self.turn_running = False
        elif kind == "permission_request":
            await self._permission(notification)
        elif kind == "permission_resolved":
            self.asked.pop(str(notification.get("pending_id")), None)

    async def _permission(self, pending: dict[str, Any]) -> None:
        pending_id = str(pending.get("pending_id"))
        options = list(pending.get("options") or [])
        if self.answer == "ask" and not self.stdin_ended:
            self.asked[pending_id] = options
            self.transcript.line("answer: a number, an option id, or an empty line to cancel")
            return
        chosen = choose_option(options, self.answer) if self.answer in ("allow", "reject") else None
        await self._respond(pending_id, chosen)

    async def answer_line(self, line: str) -> bool:
        """Gives a typed line to the oldest permission request waiting; False when none was waiting."""
        if not self.asked:
            return False
        pending_id, options = next(iter(self.asked.items()))
        try:
            chosen = parse_answer(line, options)
        except ValueError as exc:
            self.transcript.line(str(exc))
            return True
        del self.asked[pending_id]
        await self._respond(pending_id, chosen)
        return True

    async def end_of_input(self) -> None:
        """No one is left to answer once stdin has ended: waiting requests, and later ones, are cancelled."""
        self.stdin_ended = True
        asked, self.asked = self.asked, {}
        for pending_id in asked:
            await self._respond(pending_id, None)

    async def _respond(self, pending_id: str, option: dict[str, Any] | None) -> None:
        answer: dict[str, Any] = {"option_id": option["optionId"]} if option else {"cancelled": True}
        try:
            await self.client.request(
                "permission.respond", task_id=self.agent_id, pending_id=pending_id, **answer
            )
        except GatewayError as exc:
            self.transcript.line(f"[{exc}]")

    async def cancel_turn(self) -> None:
        self.transcript.line("[cancelling the turn; Ctrl-C again to leave]")
        try:
            await self.client.request("session.cancel", task_id=self.agent_id)
        except GatewayError as exc:
            self.transcript.line(f"[{exc}]")


async def run_prompt(target: Target, text: str, answer: str) -> int:
    inbox: asyncio.Queue[Event] = asyncio.Queue()
    transcript = Transcript(sys.stdout)
    with interrupts(inbox):
        async with open_session(target, inbox) as client:
            talk = Conversation(client, target.agent_id, transcript, answer)
            await talk.start()
            if answer == "ask":
                StdinPump(inbox, read_line)
            await client.request("session.prompt", task_id=target.agent_id, text=text)
            ours = False
            while True:
                kind, value = await inbox.get()
                if kind == "closed":
                    raise PluginError(f"{value} before the turn ended")
                if kind == "interrupt":
                    if value > 1:
                        transcript.end_paragraph()
                        return EXIT_INTERRUPTED
                    await talk.cancel_turn()
                elif kind == "input":
                    await (talk.end_of_input() if value is None else talk.answer_line(value))
                elif value["action"] == "session.update":
                    update = value["payload"]
                    notification = update.get("notification") or {}
                    # The turn is ours from the prompt the journal records for it; an earlier turn's end is not.
                    ours = ours or (
                        update["kind"] == "session_update"
                        and describe_update(notification)[0] == "user_message_chunk"
                    )
                    if not ours:
                        continue
                    await talk.on_update(update["kind"], notification)
                    if update["kind"] == "turn_end":
                        return exit_status(notification.get("stopReason"))
                elif value["action"] == "task.deleted":
                    raise PluginError(f"{target.agent_id} was deleted")


async def run_attach(target: Target, show_history: bool) -> int:
    inbox: asyncio.Queue[Event] = asyncio.Queue()
    transcript = Transcript(sys.stdout)
    with interrupts(inbox):
        async with open_session(target, inbox) as client:
            talk = Conversation(client, target.agent_id, transcript, "ask")
            started = await talk.start()
            info = started.get("info") or {}

            def show(entries: list[dict[str, Any]]) -> None:
                for entry in entries if show_history else []:
                    transcript.entry(entry["kind"], entry.get("notification") or {})
                if not talk.start_id:  # the whole history is shown: what follows is live
                    transcript.line(f"[attached to {target.agent_id}: {info.get('status')}; {ATTACH_HELP}]")

            show(started.get("updates") or [])
            StdinPump(inbox, read_line)
            leaving = False
            while True:
                kind, value = await inbox.get()
                if kind == "closed":
                    raise PluginError(str(value))
                if kind == "interrupt":
                    if talk.turn_running and value == 1:
                        await talk.cancel_turn()
                        continue
                    transcript.end_paragraph()
                    return 0
                if kind == "input":
                    if value is None:
                        # Ctrl-D (or the end of a script): leave once the running turn has ended.
                        await talk.end_of_input()
                        leaving = True
                    elif not await talk.answer_line(value) and await _command(talk, value.strip()):
                        return 0
                elif (page := talk.history_page(value)) is not None:
                    show(page)
                elif value["action"] == "session.update":
                    update = value["payload"]
                    await talk.on_update(update["kind"], update.get("notification") or {})
                elif value["action"] == "task.status":
                    status = value["payload"].get("status")
                    if status not in ("ready", "processing"):
                        transcript.line(f"[{target.agent_id} is {status}]")
                elif value["action"] == "task.deleted":
                    transcript.line(f"[{target.agent_id} was deleted]")
                    return EXIT_FAILED
                if leaving and not talk.turn_running and not talk.start_id:
                    return 0


async def _command(talk: Conversation, line: str) -> bool:
    """Runs one line typed in `attach`: a prompt or a /command. True when it asks to leave."""
    if not line:
        return False
    word, _, rest = line.partition(" ")
    try:
        if word in ("/quit", "/exit"):
            return True
        if word == "/cancel":
            await talk.cancel_turn()
        elif word == "/mode" and rest.strip():
            changed = await talk.client.request(
                "session.set_mode", task_id=talk.agent_id, mode_id=rest.strip()
            )
            talk.transcript.line(f"[mode: {changed.get('currentModeId')}]")
        elif word.startswith("/"):
            talk.transcript.line(f"[{ATTACH_HELP}]")
        else:
            await talk.client.request("session.prompt", task_id=talk.agent_id, text=line)
    except GatewayError as exc:
        talk.transcript.line(f"[{exc}]")
    return False


async def run_history(target: Target, output: str) -> int:
    inbox: asyncio.Queue[Event] = asyncio.Queue()
    transcript = Transcript(sys.stdout)

    def show(entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            if output == "json":
                print(json.dumps(entry, sort_keys=True))
            else:
                transcript.entry(entry["kind"], entry.get("notification") or {})

    async with open_session(target, inbox) as client:
        started, request_id = await start_task(client, target.agent_id)
        show(started.get("updates") or [])
        more = started.get("next")
        # The pages after the first, each printed as it comes.
        while more is not None:
            kind, value = await inbox.get()
            if kind == "closed":
                raise PluginError(f"{value} before the whole history came")
            if kind == "notification" and (page := history_page(value, request_id)) is not None:
                show(page.get("updates") or [])
                more = page.get("next")
    transcript.end_paragraph()
    return 0


async def run_shell(target: Target) -> int:
    inbox: asyncio.Queue[Event] = asyncio.Queue()
    out = sys.stdout
    with interrupts(inbox):
        async with open_session(target, inbox) as client:
            await client.request("task.start", task_id=target.agent_id)
            subscribed = await client.request("shell.subscribe", task_id=target.agent_id)
            with raw_terminal():
                out.write(subscribed.get("buffer") or "")
                out.flush()
                StdinPump(inbox, read_keys())
                while True:
                    kind, value = await inbox.get()
                    if kind == "closed":
                        raise PluginError(str(value))
                    if kind == "interrupt":
                        return EXIT_INTERRUPTED
                    if kind == "input":
                        # The end of piped input ends the shell's input too, as Ctrl-D at its prompt would.
                        try:
                            await client.request("shell.input", task_id=target.agent_id, data=value or "\x04")
                        except GatewayError as exc:
                            # The shell may have ended first (its `exit` is on the way); say so and go on.
                            print(f"\r\n[input not delivered: {exc}]", file=sys.stderr)
                        continue
                    payload = value["payload"]
                    if value["action"] == "shell.output" and payload.get("type") == "output":
                        out.write(payload.get("data") or "")
                        out.flush()
                    elif value["action"] == "shell.output":
                        code = payload.get("code")
                        return int(code) if code is not None else 0
                    elif value["action"] == "task.deleted":
                        raise PluginError(f"{target.agent_id} was deleted")


def set_suspend(target: Target, suspend: bool, wait: bool, timeout: float) -> int:
    """Patches spec.suspend with the user's own credentials; with `wait`, until the session got there."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(target.cluster.api())
    where = f"{PLURAL}.{GROUP}/{target.name} in namespace {target.namespace}"
    try:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, target.namespace, PLURAL, target.name, {"spec": {"suspend": suspend}}
        )
    except ApiException as exc:
        if exc.status == 404:
            raise PluginError(f"no {where}") from exc
        raise PluginError(f"cannot patch {where}: {exc.status} {exc.reason}") from exc
    print(f"agentsession.{GROUP}/{target.name} {'suspended' if suspend else 'resumed'}")
    if not wait:
        return 0
    wanted = "Suspended" if suspend else "Ready"
    deadline = time.monotonic() + timeout
    last = None
    while True:
        body: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, target.namespace, PLURAL, target.name
        )
        status = body.get("status") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        reason = (conditions.get("Ready") or {}).get("reason")
        now = f"{status.get('phase')}/{reason}"
        if now != last:
            print(f"phase/reason: {now}")
            last = now
        if (
            status.get("observedGeneration") == body["metadata"].get("generation")
            and status.get("phase") == wanted
        ):
            return 0
        if time.monotonic() > deadline:
            raise PluginError(f"{target.agent_id} is not {wanted} after {timeout:.0f}s (it is {now})")
        time.sleep(0.5)


# ---------------------------------------------------------------- get and status: the API server's view

BUDGET_CONDITION = "BudgetExhausted"
BUDGET_LIMITS = (("maxRequests", "requests"), ("maxTokens", "tokens"), ("maxCostUSD", "USD"))


def _usage(body: dict[str, Any]) -> dict[str, Any]:
    return (body.get("status") or {}).get("usage") or {}


def total_tokens(usage: dict[str, Any]) -> int:
    """Input (not from cache) + cached input + output: what a budget's maxTokens counts."""
    return sum(int(usage.get(k) or 0) for k in ("inputTokens", "cachedTokens", "outputTokens"))


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def budget_exhausted(body: dict[str, Any]) -> str | None:
    """The BudgetExhausted condition's message while it is True, else None."""
    found = _condition(body, BUDGET_CONDITION)
    if found.get("status") != "True":
        return None
    return str(found.get("message") or "a limit was reached")


def session_rows(bodies: list[dict[str, Any]]) -> list[list[str]]:
    """`get`: a header and one row per session; tokens and cost as the egress proxy metered them."""
    rows = [["NAME", "PHASE", "AGENT", "REQUESTS", "TOKENS", "COST", "BUDGET"]]
    for body in sorted(bodies, key=lambda b: b["metadata"]["name"]):
        usage = _usage(body)
        rows.append(
            [
                body["metadata"]["name"],
                str((body.get("status") or {}).get("phase") or "<none>"),  # as kubectl shows a missing field
                str(((body.get("spec") or {}).get("agent") or {}).get("type") or "demo"),
                str(int(usage.get("requests") or 0)),
                str(total_tokens(usage)),
                f"${usage.get('costUSD') or '0'}",
                "exhausted" if budget_exhausted(body) else "ok",
            ]
        )
    return rows


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def describe_session(body: dict[str, Any]) -> list[str]:
    """`status`: the phase, each condition, the usage and the budget, as lines."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    lines = [
        f"Name:       {meta['namespace']}/{meta['name']}",
        f"Agent:      {(spec.get('agent') or {}).get('type') or 'demo'}",
        f"Phase:      {status.get('phase') or 'unknown'}",
        "Conditions:",
    ]
    for c in status.get("conditions") or []:
        why = f" {c.get('reason')}" if c.get("reason") else ""
        said = f": {c.get('message')}" if c.get("message") else ""
        lines.append(f"  {c.get('type')}={c.get('status')}{why}{said}")
    usage = _usage(body)
    lines += [
        "Usage:",
        f"  Requests:       {int(usage.get('requests') or 0)}",
        f"  Input tokens:   {int(usage.get('inputTokens') or 0)} (not from cache)",
        f"  Cached tokens:  {int(usage.get('cachedTokens') or 0)}",
        f"  Output tokens:  {int(usage.get('outputTokens') or 0)}",
        f"  Tokens:         {total_tokens(usage)}",
        f"  Cost:           ${usage.get('costUSD') or '0'}",
    ]
    if usage.get("updatedTime"):
        lines.append(f"  Updated:        {usage['updatedTime']}")
    own = spec.get("budget") or {}
    limits = [f"{own[key]} {unit}" for key, unit in BUDGET_LIMITS if own.get(key) is not None]
    lines.append("Budget:")
    lines.append(
        f"  Limits:         {', '.join(limits)} (spec.budget; unset ones from the namespace or the chart)"
        if limits
        else "  Limits:         the namespace's or the chart's (spec.budget sets none)"
    )
    spent = budget_exhausted(body)
    lines.append(
        f"  Exhausted:      yes: {spent}; raise spec.budget to go on" if spent else "  Exhausted:      no"
    )
    return lines


def _read_sessions(target: Target, name: str | None) -> list[dict[str, Any]]:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(target.cluster.api())
    where = f"{PLURAL}.{GROUP}{'/' + name if name else ''} in namespace {target.namespace}"
    try:
        if name:
            one: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, target.namespace, PLURAL, name
            )
            return [one]
        listed: dict[str, Any] = custom.list_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, target.namespace, PLURAL
        )
        return list(listed.get("items") or [])
    except ApiException as exc:
        if exc.status == 404:
            raise PluginError(f"no {where}") from exc
        raise PluginError(f"cannot read {where}: {exc.status} {exc.reason}") from exc


def run_get(target: Target, name: str | None) -> int:
    bodies = _read_sessions(target, name)
    if not bodies:
        print(f"No AgentSessions in namespace {target.namespace}.")
        return 0
    print(table(session_rows(bodies)))
    return 0


def run_status(target: Target, output: str) -> int:
    (body,) = _read_sessions(target, target.name)
    if output == "json":
        status = body.get("status") or {}
        print(json.dumps({"name": target.agent_id, "phase": status.get("phase"), "usage": status.get("usage"),
                          "budget": (body.get("spec") or {}).get("budget"),
                          "budgetExhausted": budget_exhausted(body)}, indent=2))  # fmt: skip
    else:
        print("\n".join(describe_session(body)))
    return 0


# ---------------------------------------------------------------- command line


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", help="the session's namespace (default: the context's)")
    common.add_argument("--context", help="the kubeconfig context to use")
    common.add_argument(
        "--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)"
    )
    reach = argparse.ArgumentParser(add_help=False, parents=[common])
    reach.add_argument(
        "--gateway", default=os.environ.get("AGENTSESSION_GATEWAY"),
        help="the gateway's URL (ws://HOST:PORT/ws or http://HOST:PORT); default: port-forward to its Service",
    )  # fmt: skip
    reach.add_argument(
        "--gateway-service", help="NAMESPACE/NAME of the gateway's Service, when several exist"
    )
    reach.add_argument(
        "--token", default=os.environ.get("AGENTSESSION_TOKEN"), help="a bearer token to present"
    )
    reach.add_argument(
        "--service-account",
        help="[NAMESPACE/]NAME: present a token requested for this ServiceAccount and the gateway's audience",
    )
    reach.add_argument(
        "--token-audience", default=os.environ.get("AGENTSESSION_TOKEN_AUDIENCE", GATEWAY_AUDIENCE),
        help=f"the audience of the tokens requested for the gateway (default {GATEWAY_AUDIENCE})",
    )  # fmt: skip
    reach.add_argument(
        "--send-kubeconfig-token", action="store_true",
        help="present your kubeconfig's own bearer token (good for the whole Kubernetes API)",
    )  # fmt: skip
    reach.add_argument(
        "--insecure", action="store_true", help="allow a ws:// (unencrypted) --gateway on another machine"
    )

    top = argparse.ArgumentParser(
        prog="kubectl agentsession", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    attach = sub.add_parser("attach", parents=[reach], help="follow a session live and talk to it")
    attach.add_argument("name")
    attach.add_argument("--no-history", action="store_true", help="show only what happens from now on")
    prompt = sub.add_parser("prompt", parents=[reach], help="send one prompt; exit with its stop reason")
    prompt.add_argument("name")
    prompt.add_argument("text")
    prompt.add_argument(
        "--permissions", choices=("ask", "allow", "reject", "cancel"), default="ask",
        help="how permission requests of the turn are answered (ask: a line read from stdin)",
    )  # fmt: skip
    history = sub.add_parser(
        "history", parents=[reach], help="print the session's history (starts it if suspended)"
    )
    history.add_argument("name")
    history.add_argument("-o", "--output", choices=("text", "json"), default="text")
    shell = sub.add_parser("shell", parents=[reach], help="a terminal in the session's workspace")
    shell.add_argument("name")
    for verb in ("suspend", "resume"):
        cmd = sub.add_parser(verb, parents=[common], help=f"{verb} the session (spec.suspend)")
        cmd.add_argument("name")
        cmd.add_argument(
            "--wait",
            action="store_true",
            help=f"until the session is {'Suspended' if verb == 'suspend' else 'Ready'}",
        )
        cmd.add_argument("--timeout", type=float, default=120.0, help="seconds --wait waits (default 120)")
    get = sub.add_parser(
        "get", parents=[common], help="list sessions with their usage (requests, tokens, cost)"
    )
    get.add_argument("name", nargs="?")
    status = sub.add_parser(
        "status", aliases=["describe"], parents=[common], help="a session's conditions, usage and budget"
    )
    status.add_argument("name")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    return top


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    cluster = Cluster(args.kubeconfig, args.context)
    target = Target(
        cluster,
        args.namespace or cluster.namespace(),
        args.name,
        getattr(args, "gateway", None),
        getattr(args, "gateway_service", None),
        getattr(args, "token", None),
        getattr(args, "service_account", None),
        getattr(args, "token_audience", GATEWAY_AUDIENCE),
        getattr(args, "send_kubeconfig_token", False),
        getattr(args, "insecure", False),
    )
    if args.command == "get":
        return run_get(target, args.name)
    if args.command in ("status", "describe"):
        return run_status(target, args.output)
    if args.command in ("suspend", "resume"):
        return set_suspend(target, args.command == "suspend", args.wait, args.timeout)
    if args.command == "prompt":
        return asyncio.run(run_prompt(target, args.text, args.permissions))
    if args.command == "attach":
        return asyncio.run(run_attach(target, not args.no_history))
    if args.command == "history":
        return asyncio.run(run_history(target, args.output))
    return asyncio.run(run_shell(target))


def main() -> None:
    try:
        code = run(sys.argv[1:])
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_FAILED
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    sys.exit(code)


if __name__ == "__main__":
    main()
