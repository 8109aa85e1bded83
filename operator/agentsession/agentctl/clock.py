"""Timestamps in the one format of the API: RFC 3339, UTC, milliseconds, 'Z'."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> str:
    return format_ts(datetime.now(UTC))


def format_ts(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
