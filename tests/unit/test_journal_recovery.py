"""The journal survives a crash mid-write: a torn final line is cut off on reopen and the history reads back whole."""

from __future__ import annotations

import json
from pathlib import Path

from agentsession.agentctl.journal import Journal, Stored


def _seqs(entries: list[Stored]) -> list[int]:
    return [entry.seq for entry in entries]


def test_torn_tail_is_repaired_and_history_reads_back_gap_free(tmp_path: Path) -> None:
    """After a crash leaves half a line at the end, reopening drops exactly that half line: every whole entry
    reads back (through `read` and a fresh instance), new appends continue the seqs with no gap or duplicate,
    and every line in the file is a whole JSON entry again."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    written = [journal.append("session_update", {"n": n}) for n in range(1, 4)]
    journal.close()
    torn = json.dumps({"seq": 4, "timestamp": "2026-01-01T00:00:00Z", "kind": "session_update"})
    with path.open("ab") as f:
        f.write(torn[: len(torn) // 2].encode())  # the write a crash interrupted: no newline, not valid JSON

    reopened = Journal(path)
    assert reopened.last_seq == 3
    assert reopened.last_timestamp == json.loads(written[-1].text)["timestamp"]
    assert list(reopened.entries()) == written
    after = [reopened.append("session_update", {"n": n}) for n in range(4, 6)]
    assert _seqs(after) == [4, 5]
    history = list(reopened.entries())
    assert history == written + after
    assert list(reopened.entries(after=2)) == written[2:] + after
    reopened.close()

    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # the file ends on a whole line
    assert [line.decode() for line in lines[:-1]] == [entry.text for entry in history]

    fresh = Journal(path)
    assert fresh.last_seq == 5
    assert list(fresh.entries()) == history
    assert _seqs(list(fresh.entries())) == [1, 2, 3, 4, 5]
    fresh.close()


def test_torn_line_that_ends_in_a_newline_is_skipped(tmp_path: Path) -> None:
    """A tail that did get its newline but is not a whole entry (garbage after a crash) stays in the file, and
    every reader skips it: later appends sit behind it and are read, with the seq after the last whole entry."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    written = [journal.append("session_update", {"n": n}) for n in range(1, 3)]
    journal.close()
    with path.open("ab") as f:
        f.write(b'{"seq": 3, "timest\n')

    reopened = Journal(path)
    later = reopened.append("session_update", {"n": 3})
    assert later.seq == 3
    assert list(reopened.entries()) == [*written, later]
    reopened.close()
    assert list(Journal(path).entries()) == [*written, later]


def _prompt(session_id: str) -> dict[str, object]:
    return {
        "sessionId": session_id,
        "update": {"sessionUpdate": "user_message_chunk", "content": {"text": "hi"}},
    }


def test_a_turn_begun_and_never_ended_is_found_on_reopen(tmp_path: Path) -> None:
    """agentctl killed mid-turn leaves the user's prompt without its turn_end: the next one learns whose turn it
    was; a turn that ended, or no turn at all, leaves nothing to close."""
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    assert journal.unfinished_turn is None
    journal.append("session_update", _prompt("s1"))
    journal.append("turn_end", {"sessionId": "s1", "stopReason": "end_turn"})
    journal.close()
    assert Journal(path).unfinished_turn is None

    journal = Journal(path)
    journal.append("session_update", _prompt("s1"))
    journal.append("session_update", {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk"}})
    journal.append("permission_request", {"session_id": "s1"})
    journal.close()
    reopened = Journal(path)
    assert reopened.unfinished_turn == "s1"
    reopened.append("turn_end", {"sessionId": "s1", "stopReason": "error"})
    reopened.close()
    assert Journal(path).unfinished_turn is None
