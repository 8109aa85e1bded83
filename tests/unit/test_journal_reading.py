"""agentctl's journal: what an entry holds, which entries a read returns, where recovery stops trusting the
file, and the identity that tells one journal from the next at the same path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from agentsession.agentctl.journal import Journal


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path / "journal.jsonl")
    for n in range(1, 6):
        opened.append("session_update", {"n": n})
    yield opened
    opened.close()


def _seqs(entries: list[dict[str, object]]) -> list[object]:
    return [entry["seq"] for entry in entries]


def test_an_entry_is_numbered_stamped_and_kept_as_written(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dirs" / "journal.jsonl"
    journal = Journal(path)
    assert journal.path == path
    assert (journal.last_seq, journal.last_timestamp, journal.has_entries()) == (0, None, False)
    entry = journal.append("turn_end", {"stopReason": "end_turn"})
    assert set(entry) == {"seq", "timestamp", "kind", "notification"}
    assert (entry["seq"], entry["kind"], entry["notification"]) == (1, "turn_end", {"stopReason": "end_turn"})
    # RFC 3339 in UTC with milliseconds: the one timestamp format of agentctl's API.
    assert entry["timestamp"].endswith("Z")
    assert datetime.fromisoformat(entry["timestamp"]).utcoffset() is not None
    assert len(entry["timestamp"].split(".")[1]) == len("123Z")
    assert (journal.last_seq, journal.last_timestamp, journal.has_entries()) == (1, entry["timestamp"], True)
    # Each entry is one line of JSON, so a reader of the bare file (or a crash) never sees half of two entries.
    assert [json.loads(line) for line in path.read_text().splitlines()] == [entry]
    journal.close()


@pytest.mark.parametrize(
    ("after", "upto", "limit", "seqs"),
    [
        (0, None, None, [1, 2, 3, 4, 5]),
        (2, None, None, [3, 4, 5]),
        (0, 3, None, [1, 2, 3]),
        (1, 4, None, [2, 3, 4]),
        (0, None, 2, [1, 2]),
        (2, None, 1, [3]),
        (0, 5, 5, [1, 2, 3, 4, 5]),
        (0, 5, 9, [1, 2, 3, 4, 5]),
        (5, None, None, []),  # nothing after the newest
        (3, 3, None, []),  # an empty window
        (4, 2, None, []),  # a window that ends before it starts
        (0, 0, None, []),
    ],
)
def test_read_returns_the_window_after_upto_oldest_first(
    journal: Journal, after: int, upto: int | None, limit: int | None, seqs: list[int]
) -> None:
    assert _seqs(journal.read(after, upto, limit)) == seqs


def test_read_stops_at_an_append_still_in_flight(journal: Journal) -> None:
    with journal.path.open("a") as f:
        f.write('{"seq": 6, "timestamp": "2026-01-01T00:00:00.000Z", "kind": "x"')  # no newline yet
    assert _seqs(journal.read(0, upto=6)) == [1, 2, 3, 4, 5]


def test_read_does_not_return_what_was_appended_after_upto(journal: Journal) -> None:
    # A reader that snapshotted last_seq replays up to there and takes the rest from the live stream.
    upto = journal.last_seq
    journal.append("session_update", {"n": 6})
    assert _seqs(journal.read(0, upto)) == [1, 2, 3, 4, 5]
    assert _seqs(journal.read(0)) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        (b"not json at all\n", "not JSON"),
        (b'{"timestamp": "2026-01-01T00:00:00.000Z", "kind": "x"}\n', "no seq"),
        (b'{"seq": 3, "kind": "x"}\n', "no timestamp"),
        (b'{"seq": "three", "timestamp": "t", "kind": "x"}\n', "a seq that is not a number"),
        (b"[3]\n", "not an object"),
    ],
)
def test_recovery_keeps_whole_entries_up_to_the_first_damaged_line(
    tmp_path: Path, bad_line: bytes, why: str
) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    kept = [journal.append("session_update", {"n": n}) for n in (1, 2)]
    journal.close()
    good_size = path.stat().st_size
    with path.open("ab") as f:
        f.write(bad_line)
        f.write(b'{"seq": 9, "timestamp": "2026-01-01T00:00:00.000Z", "kind": "x", "notification": {}}\n')

    reopened = Journal(path)
    assert reopened.last_seq == 2, why
    assert reopened.last_timestamp == kept[-1]["timestamp"]
    assert path.stat().st_size == good_size
    assert reopened.read() == kept
    reopened.close()


def test_recovery_leaves_a_whole_file_alone(journal: Journal, caplog: pytest.LogCaptureFixture) -> None:
    journal.close()
    before = journal.path.read_bytes()
    reopened = Journal(journal.path)
    assert (reopened.last_seq, reopened.path.read_bytes()) == (5, before)
    assert "truncating" not in caplog.text
    reopened.close()


@pytest.mark.parametrize("content", [b"", b'{"seq": 1, "tim'], ids=["empty", "only a torn line"])
def test_a_journal_without_a_whole_entry_starts_at_the_beginning(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(content)
    journal = Journal(path)
    assert (journal.last_seq, journal.last_timestamp, journal.has_entries()) == (0, None, False)
    assert journal.append("turn_end", {})["seq"] == 1
    journal.close()


def test_a_damaged_tail_is_reported_with_the_size_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(path).close()
    path.write_bytes(b'{"seq": 1, "tim')
    with caplog.at_level("WARNING", logger="agentsession.agentctl.journal"):
        Journal(path).close()
    (record,) = caplog.records
    assert (record.levelname, getattr(record, "path", None), getattr(record, "size", None)) == (
        "WARNING",
        str(path),
        0,
    )


def _id_file(path: Path) -> Path:
    return path.with_name(path.name + ".id")


def test_the_identity_is_kept_beside_the_journal_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    first = Journal(path)
    assert len(first.id) == 32
    assert _id_file(path).read_text() == first.id + "\n"
    first.close()
    again = Journal(path)
    assert again.id == first.id
    again.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.jsonl", "journal.jsonl.id"]


@pytest.mark.parametrize("id_file", ["missing", "empty"])
def test_a_journal_whose_identity_was_lost_gets_a_new_one(tmp_path: Path, id_file: str) -> None:
    path = tmp_path / "journal.jsonl"
    first = Journal(path)
    first.append("session_update", {})
    first.close()
    if id_file == "missing":
        _id_file(path).unlink()
    else:
        _id_file(path).write_text("\n")
    reopened = Journal(path)
    assert reopened.id not in {first.id, ""}
    assert _id_file(path).read_text().strip() == reopened.id
    assert reopened.last_seq == 1  # the entries themselves are kept
    reopened.close()


def test_each_new_journal_has_its_own_identity(tmp_path: Path) -> None:
    ids = set()
    for n in range(3):
        path = tmp_path / f"w{n}" / "journal.jsonl"
        journal = Journal(path)
        ids.add(journal.id)
        journal.close()
    assert len(ids) == 3
