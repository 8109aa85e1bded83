"""An open connection keeps what it was admitted with only while that still holds.

Every `interval` (shortened by a little jitter, so that connections opened together do not all ask at once) the
connection's token is reviewed again, and so is each access the connection receives data by: `get` in every
namespace it sees, `update` on every session whose shell it watches. A refusal ends the connection with a typed
error and a close code: 4001 for the token, 4003 for access. The token's own expiry (a JWT's `exp`) ends it on
time, whatever the interval. When the API server cannot answer, the connection stays and is checked again at the
next interval; its token's expiry still ends it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable

from aiohttp import WSCloseCode

from agentsession.gateway import metrics
from agentsession.gateway.auth import Authenticator, AuthError, token_expiry
from agentsession.gateway.connection import CLOSE_FORBIDDEN, CLOSE_UNAUTHORIZED, Connection
from agentsession.gateway.events import ErrorCode, Failure
from agentsession.gateway.sessions import Key

log = logging.getLogger(__name__)

JITTER = 0.1  # each wait is between (1 - JITTER) and 1 times the interval


async def guard(
    conn: Connection,
    auth: Authenticator,
    token: str,
    interval: float,
    shells: Callable[[], Iterable[Key]],
) -> None:
    """Runs for the connection's life; `shells` names the sessions whose shell the connection watches."""
    expires = token_expiry(token)
    while not conn.closed:
        wait = interval * random.uniform(1.0 - JITTER, 1.0)
        if expires is not None:
            wait = min(wait, expires - time.time())
        if wait > 0:
            await asyncio.sleep(wait)
        if expires is not None and time.time() >= expires:
            _end(conn, "expired", ErrorCode.UNAUTHORIZED, "your token expired; connect again with a new one")
            return
        try:
            holds = await _still_holds(conn, auth, token, list(shells()))
        except Exception:
            # Access that cannot be checked is not kept: the client reconnects and is checked from the start.
            log.exception("cannot check an open connection's access again")
            failure = Failure(
                ErrorCode.INTERNAL_ERROR, "the gateway could not check your access again; reconnect"
            )
            conn.shut(failure, WSCloseCode.INTERNAL_ERROR, "internal error")
            return
        if not holds:
            return


async def _still_holds(conn: Connection, auth: Authenticator, token: str, shells: list[Key]) -> bool:
    try:
        identity = await auth.authenticate(token, fresh=True)
    except AuthError as exc:
        if exc.status != 401:
            log.warning("cannot check the token of an open connection again: %s", exc.message)
            return True
        _end(conn, "revoked", ErrorCode.UNAUTHORIZED,
             "the Kubernetes API server no longer accepts your token; connect again with a valid one")  # fmt: skip
        return False
    if identity.key != conn.identity.key:
        _end(conn, "revoked", ErrorCode.UNAUTHORIZED, "your token now stands for another user; connect again")
        return False
    needed = [(ns, "get", "") for ns in conn.namespaces_seen()] + [
        (ns, "update", name) for ns, name in shells
    ]
    for namespace, verb, name in needed:
        if await auth.review_access(conn.identity, namespace, verb, name, fresh=True) is False:
            what = f"agentsession {namespace}/{name}" if name else f"agentsessions in namespace {namespace}"
            _end(conn, "withdrawn", ErrorCode.FORBIDDEN,
                 f"you may no longer {verb} {what}; connect again to see what you may")  # fmt: skip
            return False
    return True


def _end(conn: Connection, outcome: str, code: str, message: str) -> None:
    metrics.AUTH_DECISIONS.labels(f"connection_{outcome}").inc()
    log.info("closing a connection: %s", message, extra={"user": conn.identity.username})
    close = CLOSE_UNAUTHORIZED if code == ErrorCode.UNAUTHORIZED else CLOSE_FORBIDDEN
    conn.shut(
        Failure(code, message), close, f"token {outcome}" if close == CLOSE_UNAUTHORIZED else "forbidden"
    )
