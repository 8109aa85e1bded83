"""agentctl's journal: what an entry holds, which entries a read returns, which lines a reader skips (and reports
once), where recovery stops trusting the file, and the identity that tells one journal from the next at the same
path."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agentsession.agentctl import journal as journal_module
from agentsession.agentctl.journal import Journal, Stored
from agentsession.contract.wire import ENTRY_MAX_BYTES, JournalEntry

LOGGER = "agentsession.agentctl.journal"


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path / "journal.jsonl")
    for n in range(1, 6):
        opened.append("session_update", {"n": n})
    yield opened
    opened.close()


def _seqs(entries: Iterator[Stored] | list[Stored]) -> list[int]:
    return [entry.seq for entry in entries]


def _line(seq: Any, **fields: Any) -> bytes:
    entry = {
        "seq": seq,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "kind": "session_update",
        "notification": {},
    }
    return json.dumps({**entry, **fields}).encode() + b"\n"


def _write(path: Path, *lines: bytes) -> None:
    with path.open("ab") as f:
        for line in lines:
            f.write(line)


class Skips:
    """What a journal reported as skipped: the reasons given to its callback, in order."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


def test_an_entry_is_numbered_stamped_and_kept_as_written(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dirs" / "journal.jsonl"
    journal = Journal(path)
    assert journal.path == path
    assert (journal.last_seq, journal.last_timestamp, journal.has_entries()) == (0, None, False)
    stored = journal.append("turn_end", {"stopReason": "end_turn"})
    entry = json.loads(stored.text)
    assert set(entry) == {"seq", "timestamp", "kind", "notification"}
    assert (entry["seq"], entry["kind"], entry["notification"]) == (1, "turn_end", {"stopReason": "end_turn"})
    assert (stored.seq, stored.kind, stored.size) == (1, "turn_end", len(stored.text.encode()))
    # RFC 3339 in UTC with milliseconds: the one timestamp format of agentctl's API.
    assert entry["timestamp"].endswith("Z")
    assert datetime.fromisoformat(entry["timestamp"]).utcoffset() is not None
    assert len(entry["timestamp"].split(".")[1]) == len("123Z")
    assert (journal.last_seq, journal.last_timestamp, journal.has_entries()) == (1, entry["timestamp"], True)
    # Each entry is one line of JSON, so a reader of the bare file (or a crash) never sees half of two entries.
    assert path.read_bytes() == stored.text.encode() + b"\n"
    assert list(journal.entries()) == [stored]
    journal.close()


@pytest.mark.parametrize(
    ("after", "upto", "seqs"),
    [
        (0, None, [1, 2, 3, 4, 5]),
        (2, None, [3, 4, 5]),
        (0, 3, [1, 2, 3]),
        (1, 4, [2, 3, 4]),
        (0, 5, [1, 2, 3, 4, 5]),
        (0, 9, [1, 2, 3, 4, 5]),
        (5, None, []),  # nothing after the newest
        (3, 3, []),  # an empty window
        (4, 2, []),  # a window that ends before it starts
        (0, 0, []),
    ],
)
async def test_a_read_returns_the_window_after_upto_oldest_first(
    journal: Journal, after: int, upto: int | None, seqs: list[int]
) -> None:
    assert _seqs(journal.entries(after, upto)) == seqs
    assert [entry async for entry in journal.stream(after, upto)] == list(journal.entries(after, upto))


def test_a_read_stops_at_an_append_still_in_flight(journal: Journal) -> None:
    _write(journal.path, _line(6)[:-20])  # no newline yet
    assert _seqs(journal.entries(0, upto=6)) == [1, 2, 3, 4, 5]


def test_a_read_does_not_return_what_was_appended_after_upto(journal: Journal) -> None:
    # A reader that snapshotted last_seq replays up to there and takes the rest from the live stream.
    upto = journal.last_seq
    journal.append("session_update", {"n": 6})
    assert _seqs(journal.entries(0, upto)) == [1, 2, 3, 4, 5]
    assert _seqs(journal.entries(0)) == [1, 2, 3, 4, 5, 6]


async def test_a_stream_reads_in_batches_and_gives_the_same_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    written = [journal.append("session_update", {"text": "x" * 100}) for _ in range(50)]
    batches: list[int] = []
    batch = journal._batch

    def counted(*args: Any) -> tuple[list[Stored], bool]:
        result = batch(*args)
        batches.append(len(result[0]))
        return result

    monkeypatch.setattr(journal_module, "READ_CHUNK_BYTES", 3 * written[0].size)
    monkeypatch.setattr(journal, "_batch", counted)
    assert [entry async for entry in journal.stream(4)] == written[4:]
    # Three entries a batch, the last one short: the read never held more than a batch.
    assert batches == [3] * 15 + [1]
    journal.close()


UNPARSABLE = [
    (b"not json at all\n", "not JSON"),
    (b"\xff\xfe\n", "not UTF-8"),
    (b"[3]\n", "not an object"),
    (_line(None), "no seq"),
    (_line("3"), "a seq that is not a number"),
    (_line(True), "a seq that is a boolean"),
    (_line(3, timestamp=None), "no timestamp"),
    (_line(3, kind="user_said"), "a kind the contract does not have"),
    (_line(3, notification=[1]), "a notification that is not an object"),
    (_line(3, truncated={"bytes": "many"}), "a truncated marker without a size"),
    (b"[" * 100_000 + b"\n", "nested too deeply to parse"),
]


@pytest.mark.parametrize(("bad_line", "why"), UNPARSABLE, ids=[why for _, why in UNPARSABLE])
def test_a_line_that_is_not_an_entry_is_skipped_and_reported_once(
    tmp_path: Path, bad_line: bytes, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.jsonl"
    skips = Skips()
    journal = Journal(path, on_skip=skips)
    journal.append("session_update", {"n": 1})
    _write(path, bad_line)
    later = journal.append("session_update", {"n": 2})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            assert _seqs(journal.entries()) == [1, 2], why
    assert skips.reasons == ["unparsable"], why
    assert [getattr(r, "reason", None) for r in caplog.records] == ["unparsable"]
    journal.close()

    # After a restart the recovery reports it, once, and the readers do not again.
    skips.reasons.clear()
    reopened = Journal(path, on_skip=skips)
    assert reopened.last_seq == 2, why
    assert _seqs(reopened.entries()) == [1, 2]
    assert list(reopened.entries(1)) == [later]
    assert skips.reasons == ["unparsable"]
    assert reopened.append("turn_end", {}).seq == 3
    reopened.close()


def test_a_forged_huge_seq_hides_nothing_and_appends_go_on_after_the_real_last(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    skips = Skips()
    journal = Journal(path, on_skip=skips)
    journal.append("session_update", {"n": 1})
    _write(path, _line(10**15))
    journal.append("session_update", {"n": 2})
    assert _seqs(journal.entries()) == [1, 2]
    journal.close()

    reopened = Journal(path, on_skip=skips)
    assert reopened.last_seq == 2  # not 10**15 + 1: later appends are not hidden behind the forged line
    assert reopened.append("turn_end", {}).seq == 3
    assert _seqs(reopened.entries()) == [1, 2, 3]
    assert skips.reasons == ["out_of_order", "out_of_order"]  # found by a reader, then by the recovery
    reopened.close()


@pytest.mark.parametrize(
    ("lines", "seqs", "skipped"),
    [
        # A seq must be above the last one read...
        ([_line(1), _line(2), _line(2), _line(3)], [1, 2, 3], ["out_of_order"]),
        ([_line(1), _line(2), _line(1), _line(3)], [1, 2, 3], ["out_of_order"]),
        # ...and no further above it than the lines read since: one line is one entry at most.
        ([_line(1), _line(3), _line(2)], [1, 2], ["out_of_order"]),
        ([_line(1), _line(10**15)], [1], ["out_of_order"]),  # last at a restart: appends go on at 2
        # A line that is not an entry may have been one (damaged): the entry after it may be one seq further.
        ([_line(1), b"garbage\n", _line(3), _line(4)], [1, 3, 4], ["unparsable"]),
        ([_line(1), b"garbage\n", b"garbage\n", _line(4)], [1, 4], ["unparsable", "unparsable"]),
        # Blank lines hold no entry and make no room for one.
        ([_line(1), b"\n", b"  \n", _line(3), _line(2)], [1, 2], ["out_of_order"]),
        # A forged line with the next seq takes the place of the real one, and only that place.
        ([_line(1), _line(2, notification={"forged": 1}), _line(2), _line(3)], [1, 2, 3], ["out_of_order"]),
    ],
)
def test_a_reader_takes_each_seq_once_and_none_far_ahead(
    tmp_path: Path, lines: list[bytes], seqs: list[int], skipped: list[str]
) -> None:
    path = tmp_path / "journal.jsonl"
    _write(path, *lines)
    skips = Skips()
    journal = Journal(path, on_skip=skips)
    assert _seqs(journal.entries()) == seqs
    assert journal.last_seq == seqs[-1]
    assert skips.reasons == skipped
    assert journal.append("turn_end", {}).seq == seqs[-1] + 1
    assert _seqs(journal.entries()) == [*seqs, seqs[-1] + 1]
    journal.close()


def test_an_over_long_line_is_read_past_without_being_kept(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    huge = _line(2, notification={"text": "x" * (3 * ENTRY_MAX_BYTES)})
    _write(path, _line(1), huge, _line(3))
    skips = Skips()
    journal = Journal(path, on_skip=skips)
    assert _seqs(journal.entries()) == [1, 3]
    assert skips.reasons == ["oversized"]
    journal.close()


def test_an_entry_whose_json_grows_past_the_limit_when_read_is_skipped(tmp_path: Path) -> None:
    """A line of non-ASCII text fits as written but not as served (each character becomes a \\u escape)."""
    path = tmp_path / "journal.jsonl"
    wide = json.dumps(
        {"seq": 2, "timestamp": "t", "kind": "session_update", "notification": {"t": "é" * 400_000}},
        ensure_ascii=False,
    )
    assert len(wide.encode()) < ENTRY_MAX_BYTES
    _write(path, _line(1), wide.encode() + b"\n", _line(3))
    skips = Skips()
    journal = Journal(path, on_skip=skips)
    assert _seqs(journal.entries()) == [1, 3]
    assert skips.reasons == ["oversized"]
    journal.close()


def test_a_reader_serves_only_the_contract_s_fields_as_the_client_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    _write(path, _line(1, extra="forged", truncated={"bytes": 9, "more": 1}))
    journal = Journal(path)
    (stored,) = journal.entries()
    assert json.loads(stored.text) == {
        "seq": 1,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "kind": "session_update",
        "notification": {},
        "truncated": {"bytes": 9},
    }
    assert JournalEntry.model_validate_json(stored.text).truncated is not None
    journal.close()


def test_each_line_appended_by_another_writer_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    skips = Skips()
    journal = Journal(tmp_path / "journal.jsonl", on_skip=skips)
    for n in range(1, 6):
        journal.append("session_update", {"n": n})
    _write(journal.path, b"one\n")
    journal.append("session_update", {"n": 6})
    _write(journal.path, b"two\n")
    journal.append("session_update", {"n": 7})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert _seqs(journal.entries(5)) == [6, 7]
        assert _seqs(journal.entries(0)) == [1, 2, 3, 4, 5, 6, 7]
    assert skips.reasons == ["unparsable", "unparsable"]
    assert len(caplog.records) == 2
    journal.close()


def test_an_entry_after_bytes_left_without_a_newline_starts_its_own_line(journal: Journal) -> None:
    """Another writer's bytes without a newline would make the next append part of their line; it starts a line
    of its own instead, and only the other writer's bytes are lost."""
    _write(journal.path, b'{"seq": 6, "timest')
    stored = journal.append("session_update", {"n": 6})
    assert _seqs(journal.entries()) == [1, 2, 3, 4, 5, 6]
    assert list(journal.entries(5)) == [stored]
    assert journal.path.read_bytes().endswith(b'{"seq": 6, "timest\n' + stored.text.encode() + b"\n")


def test_skipped_lines_are_logged_up_to_a_limit_and_all_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(journal_module, "SKIPS_LOGGED", 3)
    path = tmp_path / "journal.jsonl"
    _write(path, *[b"garbage\n"] * 10, _line(1))
    skips = Skips()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        journal = Journal(path, on_skip=skips)
    assert journal.last_seq == 1
    assert len(skips.reasons) == 10
    assert [getattr(r, "reason", None) for r in caplog.records] == ["unparsable"] * 3 + [None]
    assert "counted in agentctl_journal_lines_skipped_total" in caplog.records[-1].getMessage()
    journal.close()


@pytest.mark.parametrize("stride", [1, 3, 7])
def test_a_read_from_any_seq_finds_its_entries_through_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stride: int
) -> None:
    monkeypatch.setattr(journal_module, "INDEX_STRIDE_ENTRIES", stride)
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    for n in range(1, 30):
        journal.append("session_update", {"n": n})
        if n % 4 == 0:
            _write(path, b"garbage\n", _line(n))  # a damaged line and a repeated seq among the entries
    for reopened in (journal, Journal(path)):  # the index built by the appends, then by the recovery
        for after in range(31):
            assert _seqs(reopened.entries(after)) == list(range(after + 1, 30)), after
        assert _seqs(reopened.entries(10, 12)) == [11, 12]
    journal.close()


def test_a_read_starts_near_its_first_entry_not_at_the_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    for n in range(2000):
        journal.append("session_update", {"n": n})
    parsed: list[bytes] = []
    parse = journal_module._parse

    def counted(raw: bytes) -> dict[str, Any] | None:
        parsed.append(raw)
        return parse(raw)

    monkeypatch.setattr(journal_module, "_parse", counted)
    assert _seqs(journal.entries(1900, 1901)) == [1901]
    assert len(parsed) <= journal_module.INDEX_STRIDE_ENTRIES + 1
    journal.close()


def test_recovery_keeps_every_entry_and_cuts_only_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    kept = [journal.append("session_update", {"n": n}) for n in (1, 2)]
    journal.close()
    _write(path, b"not json\n", _line(3), _line(4)[:-10])
    good_size = path.stat().st_size - len(_line(4)[:-10])

    reopened = Journal(path)
    assert reopened.last_seq == 3
    assert path.stat().st_size == good_size
    assert _seqs(reopened.entries()) == [1, 2, 3]
    assert list(reopened.entries(0, 2)) == kept
    reopened.close()


def test_recovery_leaves_a_whole_file_alone(journal: Journal, caplog: pytest.LogCaptureFixture) -> None:
    journal.close()
    before = journal.path.read_bytes()
    reopened = Journal(journal.path)
    assert (reopened.last_seq, reopened.path.read_bytes()) == (5, before)
    assert "truncating" not in caplog.text
    reopened.close()


@pytest.mark.parametrize(
    "content",
    [b"", b'{"seq": 1, "tim', b"x" * (2 * ENTRY_MAX_BYTES)],
    ids=["empty", "only a torn line", "only a torn over-long line"],
)
def test_a_journal_without_a_whole_entry_starts_at_the_beginning(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(content)
    journal = Journal(path)
    assert (journal.last_seq, journal.last_timestamp, journal.has_entries()) == (0, None, False)
    assert path.stat().st_size == 0
    assert journal.append("turn_end", {}).seq == 1
    journal.close()


def test_a_damaged_tail_is_reported_with_the_size_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(path).close()
    path.write_bytes(b'{"seq": 1, "tim')
    with caplog.at_level("WARNING", logger=LOGGER):
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


def test_an_oversized_entry_is_stored_and_read_back_cut_with_its_marker(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "y" * (4 << 20)}}
    stored = journal.append("session_update", {"sessionId": "s1", "update": update})
    assert stored.size <= ENTRY_MAX_BYTES
    assert path.stat().st_size == stored.size + 1  # stored cut: never whole on disk
    journal.close()
    (read,) = Journal(path).entries()
    entry = JournalEntry.model_validate_json(read.text)
    assert entry.truncated is not None
    assert entry.truncated.bytes > 4 << 20
    assert entry.notification["sessionId"] == "s1"
    assert entry.notification["update"]["sessionUpdate"] == "agent_message_chunk"
    assert set(entry.notification["update"]["content"]["text"]) == {"y"}
