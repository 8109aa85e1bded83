"""The session record agentctl keeps for its restart: one that reads back, and any other content (the file sits
where others may write) read as no record at all, with a warning, instead of stopping agentctl at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsession.agentctl.session_store import SessionRecord, SessionStore


def test_a_saved_record_reads_back(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state.json")
    assert store.record == SessionRecord()
    store.record = SessionRecord(session_id="s1", cwd="/w", mode_id="code", prompt_sent=True)
    store.save()
    assert SessionStore(tmp_path / "state.json").record == store.record


@pytest.mark.parametrize(
    "content",
    [b"not json", b"\xff\xfe", b"[1, 2]", b'"a string"', b"[" * 100_000, b'{"session_id": "s1", "nope": 1'],
    ids=["not JSON", "not UTF-8", "a list", "a string", "nested too deeply", "torn"],
)
def test_anything_else_is_no_record(tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with caplog.at_level("WARNING", logger="agentsession.agentctl.session_store"):
        assert SessionStore(path).record == SessionRecord()
    assert [r.getMessage() for r in caplog.records] == ["ignoring unreadable session state"]
