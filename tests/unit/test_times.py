"""RFC 3339 times: each precision its readers know, always in UTC with a Z, and read back as the API writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from agentsession.api.times import Precision, format_time, parse_time, utc_now

MOMENT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


@pytest.mark.parametrize(
    ("moment", "precision", "text"),
    [
        (MOMENT, "seconds", "2026-01-02T03:04:05Z"),
        (MOMENT, "milliseconds", "2026-01-02T03:04:05.678Z"),
        (MOMENT, "microseconds", "2026-01-02T03:04:05.678901Z"),
        (MOMENT, "auto", "2026-01-02T03:04:05.678901Z"),
        (MOMENT.replace(microsecond=0), "auto", "2026-01-02T03:04:05Z"),
        (MOMENT.replace(microsecond=0), "microseconds", "2026-01-02T03:04:05.000000Z"),
        # Another zone is told in UTC.
        (MOMENT.astimezone(timezone(timedelta(hours=2))), "seconds", "2026-01-02T03:04:05Z"),
    ],
)
def test_a_moment_is_written_in_utc_at_the_callers_precision(
    moment: datetime, precision: Precision, text: str
) -> None:
    assert format_time(moment, precision) == text


def test_now_is_written_the_same_way() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    text = utc_now("seconds")
    after = datetime.now(UTC)
    assert text.endswith("Z")
    assert len(text) == len("2026-01-02T03:04:05Z")
    parsed = parse_time(text)
    assert parsed is not None
    assert before <= parsed <= after
    assert len(utc_now("milliseconds")) == len("2026-01-02T03:04:05.678Z")


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-01-02T03:04:05Z", MOMENT.replace(microsecond=0)),
        ("2026-01-02T03:04:05.678901Z", MOMENT),
        ("2026-01-02T05:04:05+02:00", MOMENT.replace(microsecond=0)),
    ],
)
def test_a_time_the_api_wrote_is_read_back(text: str, moment: datetime) -> None:
    parsed = parse_time(text)
    assert parsed == moment
    assert parsed is not None
    assert parsed.utcoffset() is not None


@pytest.mark.parametrize("missing", [None, ""])
def test_no_time_reads_as_none(missing: str | None) -> None:
    assert parse_time(missing) is None


def test_a_written_time_reads_back_as_the_moment() -> None:
    assert parse_time(format_time(MOMENT, "microseconds")) == MOMENT
