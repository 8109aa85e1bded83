"""How agentctl's clients prove they hold its token without ever sending it, and where the token comes from.

Tokens. Each agentctl's token is derived from one release key, an HMAC over the namespace and the stem of the pod's
children (`SessionRef.children`: the session's name, or the warm pod's stem it claimed from a pool). The operator
and the gateway hold the key, so both compute the same token without reading any Secret; the stem does not change
when a session claims a pool's pod, so neither does the token. The operator still writes it into the pod's token
Secret, which is where agentctl reads it from.

Signatures. A request carries `Authorization: AgentctlSignature v1 i=<instance>,k=<key id>,t=<unix seconds>,
n=<nonce>,s=<hex HMAC-SHA256 of the request line>` instead of the token. `i` is the instance id agentctl chose
at its start and sends on every answer (the `Agentctl-Instance` header); a process that binds agentctl's port
while agentctl restarts cannot know the id the next agentctl will choose, so what it captures is refused there.
agentctl also refuses a `t` outside its window and a nonce it has seen (`agentctl.authentication`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SCHEME: Final = "AgentctlSignature"
VERSION: Final = "v1"
# On every answer of agentctl: the id of this agentctl process, which signatures must name.
INSTANCE_HEADER: Final = "Agentctl-Instance"
# A signature's time may differ from agentctl's clock by this much, either way.
WINDOW_SECONDS: Final = 60
NONCE_BYTES: Final = 16
KEY_ID_LENGTH: Final = 16
# The release key: enough bytes that guessing it is out of reach (the chart makes 64 random characters).
MIN_KEY_BYTES: Final = 32
_TOKEN_LABEL: Final = b"agentsession.dev/agentctl-token/v1"
_KEY_ID_LABEL: Final = b"agentsession.dev/agentctl-key-id/v1"
_FIELDS: Final = ("i", "k", "t", "n", "s")
_FORMAT: Final = {
    "i": re.compile(r"[0-9a-f]{1,64}"),
    "k": re.compile(rf"[0-9a-f]{{{KEY_ID_LENGTH}}}"),
    "t": re.compile(r"[0-9]{1,12}"),
    "n": re.compile(r"[0-9a-f]{16,64}"),
    "s": re.compile(r"[0-9a-f]{64}"),
}


class ReleaseKeyError(ValueError):
    """The release key cannot be used; the message says which file and why."""


def read_key(path: Path) -> bytes:
    """The release key from its file (the chart mounts its Secret there), surrounding whitespace removed."""
    try:
        key = path.read_bytes().strip()
    except OSError as error:
        raise ReleaseKeyError(f"cannot read the agentctl key file {path}: {error.strerror}") from error
    if len(key) < MIN_KEY_BYTES:
        raise ReleaseKeyError(
            f"the agentctl key file {path} holds {len(key)} bytes; at least {MIN_KEY_BYTES} random bytes are "
            "needed (the chart's Secret `<release>-agentctl-key` holds one)"
        )
    return key


def require_key(path: Path | None, program: str, flag: str, elsewhere: str) -> None:
    """Stops `program` at start, with a usage error naming `flag`, when its release key is missing or unusable;
    `elsewhere` says what to give it outside the chart (which mounts its Secret `<release>-agentctl-key`)."""
    problem = "not set"
    if path is not None:
        try:
            read_key(path)
            return
        except ReleaseKeyError as error:
            problem = str(error)
    print(
        f"{program}: error: {flag}: {problem}; the chart mounts its Secret <release>-agentctl-key, elsewhere "
        f"{elsewhere}",
        file=sys.stderr,
    )
    raise SystemExit(2)


@dataclass(frozen=True)
class TokenDeriver:
    """The agentctl token of the pod whose children are named after `stem` in `namespace`."""

    key: bytes

    def __call__(self, namespace: str, stem: str) -> str:
        # JSON keeps the two apart whatever they hold: ("a", "b-c") and ("a-b", "c") never meet.
        message = _TOKEN_LABEL + b"\n" + json.dumps([namespace, stem]).encode()
        digest = hmac.new(self.key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def key_id(token: str) -> str:
    """A public name of the token: tells agentctl (and a stand-in) which token signed, reveals nothing of it."""
    return hmac.new(token.encode(), _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:KEY_ID_LENGTH]


def signature(token: str, instance: str, method: str, target: str, timestamp: int, nonce: str) -> str:
    """HMAC-SHA256 (hex) of the request line: `target` is the path with its query, as sent."""
    message = "\n".join((f"{SCHEME} {VERSION}", instance, method.upper(), target, str(timestamp), nonce))
    return hmac.new(token.encode(), message.encode(), hashlib.sha256).hexdigest()


def authorization(
    token: str, instance: str, method: str, target: str, *, now: float | None = None, nonce: str | None = None
) -> str:
    """The Authorization header of one request; a new nonce each time unless one is given (tests)."""
    timestamp = int(time.time() if now is None else now)
    nonce = nonce or secrets.token_hex(NONCE_BYTES)
    mac = signature(token, instance, method, target, timestamp, nonce)
    return f"{SCHEME} {VERSION} i={instance},k={key_id(token)},t={timestamp},n={nonce},s={mac}"


def valid_instance(value: str) -> bool:
    return _FORMAT["i"].fullmatch(value) is not None


@dataclass(frozen=True)
class Signed:
    instance: str
    key_id: str
    timestamp: int
    nonce: str
    signature: str


class BadHeader(ValueError):
    """An Authorization header that is not a well-formed signature; the message says what is wrong."""


def parse(header: str) -> Signed:
    scheme, _, rest = header.strip().partition(" ")
    if scheme != SCHEME:
        raise BadHeader(f"the Authorization header must use the {SCHEME} scheme (tokens are never sent)")
    version, _, params = rest.strip().partition(" ")
    if version != VERSION:
        raise BadHeader(f"unknown {SCHEME} version {version[:10]!r}; this agentctl speaks {VERSION}")
    fields: dict[str, str] = {}
    for part in params.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or name not in _FORMAT or name in fields:
            raise BadHeader(f"{SCHEME} takes {', '.join(f + '=' for f in _FIELDS)} each once")
        if not _FORMAT[name].fullmatch(value):
            raise BadHeader(f"{SCHEME} field {name} is malformed")
        fields[name] = value
    if len(fields) != len(_FIELDS):
        missing = ", ".join(f for f in _FIELDS if f not in fields)
        raise BadHeader(f"{SCHEME} lacks {missing}")
    return Signed(fields["i"], fields["k"], int(fields["t"]), fields["n"], fields["s"])
