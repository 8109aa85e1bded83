"""`/v1/git/<host>/<path>`: git's smart HTTP to a configured git host, with the session's token put in.

The agent's git rewrites `https://<host>/` to this route (GIT_CONFIG_* insteadOf), so it never holds the token:
the proxy adds `Authorization: Basic x-access-token:<GIT_TOKEN>` from the session's credentials Secret. Clone and
fetch always go; a push (git-receive-pack) only with spec.network.git.push.
"""

from __future__ import annotations

import base64
from typing import Final

import aiohttp
from aiohttp import web
from yarl import URL

from agentsession.egress_proxy import metrics
from agentsession.egress_proxy.credentials import GIT_TOKEN_KEY, CredentialError
from agentsession.egress_proxy.errors import text_error
from agentsession.egress_proxy.identity import Refusal, by_address, settled
from agentsession.egress_proxy.policy import is_push, push_refusal
from agentsession.egress_proxy.relay import outgoing, relay
from agentsession.egress_proxy.state import PROXY, peer_of
from agentsession.egress_proxy.upstream import Unreachable

PREFIX: Final = "/v1/git/"


def basic(token: str) -> str:
    return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()


async def git_call(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    host = request.match_info["host"].lower()
    if host not in proxy.settings.git_hosts:
        return text_error(Refusal(404, "not_found", f"{host} is not a git host of this proxy"))
    peer = peer_of(request)
    caller = await settled(lambda: by_address(proxy.directory, peer))
    if isinstance(caller, Refusal):
        metrics.DENIED.labels("", caller.type).inc()
        return text_error(caller)
    session = caller.session
    raw_path = request.raw_path.split("?", 1)[0][len(PREFIX) + len(host) :]
    if is_push(raw_path, request.query):
        refusal = push_refusal(session, host)
        if refusal is not None:
            metrics.DENIED.labels(session.namespace, refusal.type).inc()
            return text_error(refusal)
    headers = outgoing(request.headers, drop=("Authorization", "Cookie"))
    if session.secret_name is not None:
        try:
            token = await proxy.secrets.value(session.namespace, session.secret_name, GIT_TOKEN_KEY)
        except CredentialError as error:
            return text_error(Refusal(503, "credentials_unavailable", f"{error}; retry shortly"))
        if token:
            headers["Authorization"] = basic(token)
    url = URL(f"https://{host}/{raw_path.lstrip('/')}", encoded=True).with_query(request.query_string or None)
    metrics.REQUESTS.labels(session.namespace, session.agent_type, "git").inc()
    metrics.CONNECTIONS.inc()
    try:
        data = request.content.iter_any() if request.body_exists else None
        async with proxy.http.request(
            request.method, url, headers=headers, data=data, allow_redirects=False
        ) as upstream:
            return await relay(request, upstream, decoded=False)
    except (aiohttp.ClientError, Unreachable, TimeoutError):
        return text_error(
            Refusal(502, "upstream_unavailable", f"the git host {host} could not be reached; retry")
        )
    finally:
        metrics.CONNECTIONS.dec()


def routes() -> list[web.RouteDef]:
    return [web.route("*", PREFIX + "{host}/{path:.*}", git_call)]
