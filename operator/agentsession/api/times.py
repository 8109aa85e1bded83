"""Times as the Kubernetes API and the programs' wire formats write them: RFC 3339 in UTC, with a `Z`.

Each caller keeps the precision its readers know (a Lease's MicroTime has microseconds, an Event's time whatever
the clock gives, agentctl's and the gateway's timestamps milliseconds, the in-memory API server's seconds), so the
precision is said at every call.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

# "auto": microseconds when the moment has any, else whole seconds (what `datetime.isoformat` does by default).
Precision = Literal["seconds", "milliseconds", "microseconds", "auto"]


def format_time(moment: datetime, precision: Precision) -> str:
    """`moment` in UTC, e.g. 2026-01-01T12:00:00.250Z for milliseconds."""
    return moment.astimezone(UTC).isoformat(timespec=precision).replace("+00:00", "Z")


def utc_now(precision: Precision) -> str:
    """The current time, formatted as `format_time` does."""
    return format_time(datetime.now(UTC), precision)


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time as the API server writes it (with `Z` or an offset); None for an empty or missing one."""
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
