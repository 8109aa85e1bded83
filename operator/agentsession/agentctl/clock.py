"""Timestamps in the one format of the API: RFC 3339, UTC, milliseconds, 'Z'."""

from __future__ import annotations

from datetime import UTC, datetime

from agentsession.api.times import format_time


def utc_now() -> str:
    return format_ts(datetime.now(UTC))


def format_ts(moment: datetime) -> str:
    return format_time(moment, "milliseconds")
