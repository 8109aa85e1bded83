"""agentctl's side of request signatures (`agentsession.contract.auth`): who may call it, checked per request.

A request is accepted when its signature names this process's instance id and this token's key id, was made
within WINDOW_SECONDS of agentctl's clock, matches (compared in constant time), and carries a nonce not seen
before. Nonces are remembered only while their time is inside the window (a replay older than that is refused
for its time), and at most MAX_NONCES at once: beyond that agentctl refuses new requests for a moment rather
than forget a nonce that could still be replayed. Only requests whose signature matched take a place, so a
client without the token cannot fill the memory.
"""

from __future__ import annotations

import heapq
import hmac
import secrets
import time
from collections.abc import Callable
from typing import Final

from agentsession.agentctl.errors import ApiError
from agentsession.contract.auth import (
    INSTANCE_HEADER,
    SCHEME,
    VERSION,
    WINDOW_SECONDS,
    BadHeader,
    key_id,
    parse,
    signature,
)

# At the rates agentctl's clients use (a few requests a second), far more than two windows' worth. Each costs
# about 250 bytes (measured), so the memory stays under 8 MiB.
MAX_NONCES: Final = 32768
INSTANCE_BYTES: Final = 16
HEADER_HINT: Final = f"'Authorization: {SCHEME} {VERSION} i=,k=,t=,n=,s=' (see the API document)"


def _refused(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


class Verifier:
    """Checks the signatures of one agentctl process; `instance` is its id, new at every start."""

    def __init__(
        self,
        token: str,
        *,
        clock: Callable[[], float] = time.time,
        window: float = WINDOW_SECONDS,
        max_nonces: int = MAX_NONCES,
    ) -> None:
        self.instance = secrets.token_hex(INSTANCE_BYTES)
        self._token = token
        self._key_id = key_id(token)
        self._clock = clock
        self._window = window
        self._max_nonces = max_nonces
        self._expiry: list[tuple[float, str]] = []  # a heap: when each remembered nonce may be forgotten
        self._nonces: set[str] = set()

    @property
    def remembered(self) -> int:
        return len(self._nonces)

    def check(self, header: str | None, method: str, target: str) -> None:
        """Raises ApiError (401, or 429 when the nonce memory is full) unless the request is signed right."""
        if not header:
            raise _refused(f"missing {HEADER_HINT} header")
        try:
            signed = parse(header)
        except BadHeader as error:
            raise _refused(str(error)) from None
        if signed.instance != self.instance:
            raise _refused(
                f"signed for another agentctl instance (this one restarted); sign for the {INSTANCE_HEADER} "
                "header of this answer"
            )
        if signed.key_id != self._key_id:
            raise _refused("signed with a token other than this agentctl's")
        now = self._clock()
        skew = signed.timestamp - now
        if abs(skew) > self._window:
            raise _refused(
                f"the signature's time is {skew:+.0f} s from agentctl's clock, outside ±{self._window:.0f} s; "
                "are the clocks in sync?"
            )
        expected = signature(self._token, signed.instance, method, target, signed.timestamp, signed.nonce)
        if not hmac.compare_digest(expected.encode(), signed.signature.encode()):
            raise _refused("invalid signature")
        self._forget_expired(now)
        if signed.nonce in self._nonces:
            raise _refused("this signature was used before; every request needs a new nonce")
        if len(self._nonces) >= self._max_nonces:
            raise ApiError(
                429,
                "too_many_requests",
                f"more than {self._max_nonces} signed requests within {2 * self._window:.0f} s; retry shortly",
            )
        self._nonces.add(signed.nonce)
        # Once the signature's time has left the window, the time check refuses a replay of it.
        heapq.heappush(self._expiry, (signed.timestamp + self._window, signed.nonce))

    def _forget_expired(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] < now:
            _, nonce = heapq.heappop(self._expiry)
            self._nonces.discard(nonce)
