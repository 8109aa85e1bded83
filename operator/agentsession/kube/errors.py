"""One place turns the API server's answers into typed errors; callers catch the kind they can handle.

The API server answers a refusal with a `Status` object whose `reason` (NotFound, AlreadyExists, Conflict,
Invalid, Forbidden, Gone, ...) and `message` say what happened; the message names the call as well, so a log
line or a condition built from the error tells a person what failed.
"""

from __future__ import annotations

import json
from typing import Any


class KubeError(RuntimeError):
    """A Kubernetes API call failed.

    `status` is the HTTP status (None when no answer came), `reason` the API server's reason word,
    `api_message` its own words, `kind` the kind of object the call was about.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        api_message: str = "",
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.api_message = api_message
        self.kind = kind


class KubeUnavailable(KubeError):
    """No answer: the API server could not be reached or did not answer in time."""


class NotFound(KubeError):
    """404: the object (or its namespace) does not exist."""


class Conflict(KubeError):
    """409: the object exists already, or a precondition (uid, resourceVersion) did not hold."""

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


class Invalid(KubeError):
    """422 (or 400): the object was refused as invalid; `api_message` says which field and why."""


class Forbidden(KubeError):
    """403: RBAC, an admission webhook or a quota refused the call."""


class Gone(KubeError):
    """410: a watch's resourceVersion is too old; list again."""


_BY_STATUS: dict[int, type[KubeError]] = {
    400: Invalid,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
}


def error_from_answer(what: str, status: int, body: str | bytes | None, kind: str | None = None) -> KubeError:
    """The typed error for an HTTP answer `status` with the API server's `Status` body."""
    reason, said = "", ""
    try:
        parsed: Any = json.loads(body or "")
    except ValueError:
        said = (body.decode(errors="replace") if isinstance(body, bytes) else body or "")[:500]
    else:
        if isinstance(parsed, dict):
            reason, said = str(parsed.get("reason") or ""), str(parsed.get("message") or "")
    return error_from_status(what, status, reason, said, kind)


def error_from_status(
    what: str, status: int, reason: str, api_message: str, kind: str | None = None
) -> KubeError:
    cls = _BY_STATUS.get(status, KubeError)
    text = f"{what} failed: HTTP {status} {reason}: {api_message}".replace(" : ", ": ").rstrip(": ")
    return cls(text, status=status, reason=reason, api_message=api_message, kind=kind)
