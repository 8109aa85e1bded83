"""`/v1/model/<provider>/<rest>`: the agent's model API calls, with the phantom swapped for the session's key.

The agent's base URL points here; the call goes on to `<upstream>/<rest>` (the session's spec.agent.model.baseURL,
else the provider's own API) over verified TLS, and its answer comes back chunk by chunk while its usage is read.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import aiohttp
from aiohttp import web
from yarl import URL

from agentsession.api.egress import PROVIDERS, ProviderRoute
from agentsession.egress_proxy import metrics
from agentsession.egress_proxy.credentials import CredentialError
from agentsession.egress_proxy.errors import provider_error
from agentsession.egress_proxy.identity import Caller, Refusal, by_phantom, settled
from agentsession.egress_proxy.policy import budget_refusal
from agentsession.egress_proxy.prices import Tokens
from agentsession.egress_proxy.relay import outgoing, relay
from agentsession.egress_proxy.state import PROXY, Proxy, peer_of
from agentsession.egress_proxy.upstream import Unreachable
from agentsession.egress_proxy.usage import Meter

log = logging.getLogger(__name__)

PREFIX: Final = "/v1/model/"
PROVIDER_NAMES: Final = frozenset(route.provider for route in PROVIDERS.values())
# Every header and query parameter a caller may carry a key in, whichever provider it calls: none goes on.
CREDENTIAL_HEADERS: Final = ("Authorization", "X-Api-Key", "X-Goog-Api-Key", "Cookie")
KEY_PARAM: Final = "key"


def phantom_of(provider: str, request: web.Request) -> str | None:
    headers = request.headers
    bearer = headers.get("Authorization", "")
    bearer_token = bearer[7:].strip() if bearer[:7].lower() == "bearer " else None
    if provider == "anthropic":
        return headers.get("X-Api-Key") or bearer_token
    if provider == "openai":
        return bearer_token
    return headers.get("X-Goog-Api-Key") or request.query.get(KEY_PARAM)


def key_headers(provider: str, key: str) -> dict[str, str]:
    if provider == "anthropic":
        return {"X-Api-Key": key}
    if provider == "openai":
        return {"Authorization": f"Bearer {key}"}
    return {"X-Goog-Api-Key": key}


def upstream_url(base: str, raw_rest: str, query: str) -> URL:
    """`base` joined with the rest of the path as the agent sent it (still encoded), and its query."""
    url = URL(base.rstrip("/") + "/" + raw_rest.lstrip("/"), encoded=True)
    return url.with_query(query) if query else url


def _query_without_key(request: web.Request) -> str:
    kept = [(name, value) for name, value in request.query.items() if name != KEY_PARAM]
    return str(URL.build(query=kept).query_string) if kept else ""


def _gemini_model(raw_rest: str) -> str:
    # .../models/<model>:<method>
    tail = raw_rest.rsplit("/models/", 1)[-1] if "/models/" in raw_rest else ""
    return tail.split(":", 1)[0]


def _deny(proxy: Proxy, provider: str, namespace: str, refusal: Refusal) -> web.Response:
    metrics.DENIED.labels(namespace, refusal.type).inc()
    return provider_error(provider, refusal)


async def _key(proxy: Proxy, caller: Caller, route: ProviderRoute) -> str | Refusal:
    session = caller.session
    who = f"session {session.namespace}/{session.name}"
    if session.secret_name is None:
        return Refusal(
            403, "no_credentials", f"{who} names no spec.agent.credentialsSecretRef to take its key from"
        )
    try:
        key = await proxy.secrets.value(session.namespace, session.secret_name, route.secret_key)
    except CredentialError as error:
        return Refusal(503, "credentials_unavailable", f"{error}; retry shortly")
    if not key:
        return Refusal(
            403,
            "no_credentials",
            f"the Secret {session.namespace}/{session.secret_name} of {who} has no key {route.secret_key}",
        )
    return key


async def model_call(request: web.Request) -> web.StreamResponse:
    started = time.monotonic()
    proxy = request.app[PROXY]
    provider = request.match_info["provider"]
    if provider not in PROVIDER_NAMES:
        refusal = Refusal(
            404, "not_found", f"no model route {provider!r}: use one of {', '.join(sorted(PROVIDER_NAMES))}"
        )
        return provider_error("anthropic", refusal)
    phantom, peer = phantom_of(provider, request), peer_of(request)
    caller = await settled(lambda: by_phantom(proxy.directory, phantom, peer))
    if isinstance(caller, Refusal):
        return _deny(proxy, provider, "", caller)
    session = caller.session
    route = PROVIDERS.get(session.agent_type)
    if route is None or route.provider != provider:
        where = f"/v1/model/{route.provider}" if route else "none"
        refusal = Refusal(
            403,
            "credential_not_bound",
            f"session {session.namespace}/{session.name} ({session.agent_type}) has the model route {where}",
        )
        return _deny(proxy, provider, session.namespace, refusal)
    annotations = proxy.directory.namespace_annotations(session.namespace)
    spent = budget_refusal(session, proxy.ledger.usage(session), annotations, proxy.settings.default_budget)
    if spent is not None:
        return _deny(proxy, provider, session.namespace, spent)
    key = await _key(proxy, caller, route)
    if isinstance(key, Refusal):
        return _deny(proxy, provider, session.namespace, key)

    raw_path = request.raw_path.split("?", 1)[0]
    raw_rest = raw_path[len(PREFIX) + len(provider) :]
    url = upstream_url(session.base_url or route.default_upstream, raw_rest, _query_without_key(request))
    headers = outgoing(request.headers, drop=CREDENTIAL_HEADERS)
    headers.update(key_headers(provider, key))
    # The proxy reads the answer's usage: a plain body, whatever the agent would have accepted.
    headers["Accept-Encoding"] = "identity"
    body = await request.read()
    labels = (session.namespace, session.agent_type)
    metrics.REQUESTS.labels(*labels, "model").inc()
    metrics.BYTES.labels("upstream").inc(len(body))
    proxy.ledger.count_request(session)
    hint = _gemini_model(raw_rest) if provider == "gemini" else ""
    meter: Meter | None = None
    first = True
    # Usage goes into the ledger as the stream reports it (Anthropic's input at the start), so a budget spent
    # mid-answer shows, and the running turn can be cut, before the answer ends.
    booked = Tokens()

    def book() -> None:
        nonlocal booked
        now = meter.tokens() if meter is not None else None
        if now is None:
            return
        delta = _minus(now, booked)
        if delta.input or delta.output or delta.cached:
            _account_tokens(proxy, caller, provider, delta, hint)
            booked = Tokens(booked.input + delta.input, booked.output + delta.output,
                            booked.cached + delta.cached, now.model)  # fmt: skip

    def seen(chunk: bytes) -> None:
        nonlocal first
        if first:
            metrics.FIRST_BYTE.observe(time.monotonic() - started)
            first = False
        if meter is not None:
            meter.feed(chunk)
            book()

    metrics.CONNECTIONS.inc()
    try:
        proxy.resolver.check_literal(url.host or "")
        async with proxy.http.request(
            request.method,
            url,
            headers=headers,
            data=body or None,
            allow_redirects=False,
            auto_decompress=True,
        ) as upstream:
            streaming = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
            meter = Meter(provider, streaming=streaming, model_hint=hint)
            return await relay(request, upstream, decoded=True, on_chunk=seen)
    except (aiohttp.ClientError, Unreachable, TimeoutError) as error:
        log.warning(
            "model call of %s/%s to %s failed: %s",
            session.namespace,
            session.name,
            url.host,
            type(error).__name__,
        )
        refusal = Refusal(
            502, "upstream_unavailable", f"the model API at {url.host} could not be reached; retry"
        )
        return provider_error(provider, refusal)
    finally:
        metrics.CONNECTIONS.dec()
        book()
        tokens = meter.tokens() if meter else None
        model = proxy.prices.label(provider, tokens.model if tokens and tokens.model else hint)
        metrics.MODEL_REQUESTS.labels(session.namespace, session.agent_type, model).inc()


def _minus(now: Tokens, before: Tokens) -> Tokens:
    """What `now` reports beyond what is booked; a count a provider reports lower later is never taken back."""
    return Tokens(
        max(0, now.input - before.input),
        max(0, now.output - before.output),
        max(0, now.cached - before.cached),
        now.model,
    )


def _account_tokens(proxy: Proxy, caller: Caller, provider: str, tokens: Tokens, hint: str) -> None:
    session = caller.session
    model = proxy.prices.label(provider, tokens.model or hint)
    labels = (session.namespace, session.agent_type, model)
    cost = proxy.prices.cost(provider, tokens)
    proxy.ledger.add(session, tokens, cost)
    for kind, count in (("input", tokens.input), ("output", tokens.output), ("cached", tokens.cached)):
        metrics.MODEL_TOKENS.labels(*labels, kind).inc(count)
    metrics.MODEL_COST.labels(*labels).inc(float(cost))


def routes() -> list[web.RouteDef]:
    return [web.route("*", PREFIX + "{provider}/{rest:.*}", model_call)]
