"""Append-only history of everything the clients see.

Each line is one JSON entry `{"seq", "timestamp", "kind", "notification"}`, at most ENTRY_MAX_BYTES (a larger one
is stored cut, with `truncated`: `entry_limit`). The file outlives agentctl and the agent, so `seq` continues where
the last process stopped and a reader can ask for everything after a seq. A random id, kept beside the file and
new whenever the file is, lets a reader that remembers a seq tell the journal it followed from a fresh one (a new
workspace) whose seqs start again at 1.

Reading trusts no line of the file, since others may have written to it. A reader skips a line it cannot parse as
an entry, one longer than an entry can be (read past in bounded pieces, never held), and one whose seq does not
follow: a seq must be above the last one read, and at most as far above it as the lines read since (each line is
one entry at most, so a forged line cannot claim a seq far ahead and hide every entry after it). Each skipped line
is reported once: a warning, and `agentctl_journal_lines_skipped_total`. Recovery at start reads the same way, so
appends continue after the last entry any reader sees.

Reads go through the file in batches of about READ_CHUNK_BYTES, each in a thread (`stream`): no reader holds a
range of entries, only a batch. A sparse index of seqs to offsets lets a read start near its first entry instead
of at the top of the file.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import os
import threading
import uuid
from array import array
from collections.abc import AsyncGenerator, Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, get_args

from agentsession.agentctl.clock import utc_now
from agentsession.agentctl.entry_limit import Entry, encode, fit
from agentsession.contract.wire import ENTRY_MAX_BYTES, EntryKind

log = logging.getLogger(__name__)

__all__ = ["Entry", "Journal", "Stored"]

ENTRY_KINDS = frozenset(get_args(EntryKind))
LINE_MAX = ENTRY_MAX_BYTES + 1  # an entry and its newline
SKIP_PIECE = 64 * 1024  # how much of an over-long line is read at a time, to get past it
READ_CHUNK_BYTES = 1024 * 1024  # entries one batch of a read collects, about (one entry at least)
# One index point per this many bytes or entries, whichever comes first: a read scans at most that much to reach
# its first entry. A point costs 16 bytes.
INDEX_STRIDE_BYTES = 256 * 1024
INDEX_STRIDE_ENTRIES = 256
SKIPS_LOGGED = 100  # skipped lines logged one by one; all of them are counted in the metric
SKIPS_TRACKED = 10_000  # skipped lines found after the start that are remembered, so each is reported once

# Why a line was skipped: the metric's `reason` label.
OVERSIZED = "oversized"
UNPARSABLE = "unparsable"
OUT_OF_ORDER = "out_of_order"


@dataclass(frozen=True, slots=True)
class Stored:
    """An entry as stored and served: the seq and kind that route it, and its JSON (compact ASCII, so its length
    is its size in bytes)."""

    seq: int
    kind: str
    text: str

    @property
    def size(self) -> int:
        return len(self.text)


@dataclass(slots=True)
class _Cursor:
    """Where a read of the file stands: the offset of the next line, the seq of the last entry read, and the
    lines read since that entry."""

    offset: int = 0
    last: int = 0
    lines: int = 0


def _lines(f: BinaryIO, offset: int) -> Iterator[tuple[bytes | None, int]]:
    """(line, its length) of each whole line from `offset`; the line is None when it is longer than LINE_MAX.

    Ends at the end of the file, or at a last line without its newline: an append in flight, or a tail a crash
    tore.
    """
    f.seek(offset)
    while raw := f.readline(LINE_MAX + 1):
        if raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        if len(raw) <= LINE_MAX:
            return
        length = len(raw)
        while not raw.endswith(b"\n"):
            raw = f.readline(SKIP_PIECE)
            if not raw:
                return
            length += len(raw)
        yield None, length


def _parse(raw: bytes) -> Entry | None:
    """The entry a line holds, with only the fields of the contract, or None if it holds none."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    seq, timestamp, kind, notification = (value.get(k) for k in ("seq", "timestamp", "kind", "notification"))
    if (
        type(seq) is not int
        or not isinstance(timestamp, str)
        or kind not in ENTRY_KINDS
        or not isinstance(notification, dict)
    ):
        return None
    entry: Entry = {"seq": seq, "timestamp": timestamp, "kind": kind, "notification": notification}
    truncated = value.get("truncated")
    if truncated is not None:
        if not isinstance(truncated, dict) or type(truncated.get("bytes")) is not int:
            return None
        entry["truncated"] = {"bytes": truncated["bytes"]}
    return entry


def _turn_after(entry: Entry, running: str | None) -> str | None:
    """Whose turn is running after `entry`: a turn begins with the user's prompt, which agentctl journals itself,
    and ends with its `turn_end`."""
    if entry.get("kind") == "turn_end":
        return None
    notification = entry.get("notification")
    if entry.get("kind") != "session_update" or not isinstance(notification, dict):
        return running
    update = notification.get("update")
    if isinstance(update, dict) and update.get("sessionUpdate") == "user_message_chunk":
        return str(notification.get("sessionId") or "")
    return running


Report = Callable[[int, str], None]  # (offset of a skipped line, why)


class Journal:
    def __init__(self, path: Path, on_skip: Callable[[str], None] | None = None) -> None:
        """`on_skip` is called with the reason of each skipped line, once per line (for the metric)."""
        self._path = path
        self._on_skip = on_skip
        path.parent.mkdir(parents=True, exist_ok=True)
        self._id = self._identity(fresh=not path.exists())
        # Readers run in threads while appends extend the index and the skipped lines are noted.
        self._lock = threading.Lock()
        self._index_seqs = array("q")
        self._index_offsets = array("q")
        self._skips_reported = 0
        self._reported: set[int] = set()
        # The session of a turn the file shows begun and never ended, as the last process left it.
        self.unfinished_turn: str | None = None
        self._last_seq, self._last_timestamp, self._size = self._recover()
        # Lines up to here were reported by the recovery; later ones by the first reader to find them.
        self._reported_below = self._size
        # An append is one entry (a few hundred bytes, 1 MiB at most); a synchronous write to the page cache is
        # cheaper than a thread hop and keeps the order of entries identical to the order of the agent's messages.
        self._file = path.open("a+b")  # read too: an append looks at the last byte another writer left

    @property
    def path(self) -> Path:
        return self._path

    @property
    def id(self) -> str:
        return self._id

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def last_timestamp(self) -> str | None:
        """When the newest entry was written: the last thing the agent or a user did in the session."""
        return self._last_timestamp

    def _identity(self, fresh: bool) -> str:
        id_path = self._path.with_name(self._path.name + ".id")
        if not fresh:
            try:
                return id_path.read_text(encoding="utf-8").strip() or self._new_identity(id_path)
            except FileNotFoundError:
                pass
        return self._new_identity(id_path)

    @staticmethod
    def _new_identity(id_path: Path) -> str:
        value = uuid.uuid4().hex
        # Written whole or not at all: a torn id would look like a new journal to every reader.
        partial = id_path.with_name(id_path.name + ".tmp")
        partial.write_text(value + "\n", encoding="utf-8")
        partial.replace(id_path)
        return value

    def _recover(self) -> tuple[int, str | None, int]:
        """The last seq, its timestamp and the file's size, reading as every reader does; a torn final line
        left by a crash mid-write is cut off."""
        if not self._path.exists():
            return 0, None, 0
        cursor = _Cursor()
        last_timestamp: str | None = None
        with self._path.open("rb") as f:
            for offset, entry, _ in self._scan(f, cursor, self._report):
                last_timestamp = entry["timestamp"]
                self.unfinished_turn = _turn_after(entry, self.unfinished_turn)
                self._index(entry["seq"], offset)
        if cursor.offset != self._path.stat().st_size:
            log.warning(
                "journal: truncating damaged tail", extra={"path": str(self._path), "size": cursor.offset}
            )
            os.truncate(self._path, cursor.offset)
        return cursor.last, last_timestamp, cursor.offset

    def _scan(self, f: BinaryIO, cursor: _Cursor, report: Report) -> Iterator[tuple[int, Entry, Stored]]:
        """(offset, entry, stored) of each entry from `cursor` on, in file order; the lines a reader must not
        trust are skipped and reported. `cursor` is moved past each line as it is read."""
        for raw, length in _lines(f, cursor.offset):
            offset = cursor.offset
            cursor.offset += length
            if raw is not None and raw.isspace():
                continue  # holds nothing, and so cannot make room for a seq
            cursor.lines += 1
            entry = _parse(raw) if raw is not None else None
            if entry is None:
                report(offset, OVERSIZED if raw is None else UNPARSABLE)
                continue
            text = encode(entry)  # what was read, not the line as written: only the contract's fields
            if len(text) > ENTRY_MAX_BYTES:
                report(offset, OVERSIZED)
                continue
            seq = entry["seq"]
            if not cursor.last < seq <= cursor.last + cursor.lines:
                report(offset, OUT_OF_ORDER)
                continue
            cursor.last, cursor.lines = seq, 0
            yield offset, entry, Stored(seq, entry["kind"], text)

    def _report(self, offset: int, reason: str) -> None:
        with self._lock:
            self._skips_reported += 1
            reported = self._skips_reported
        if reported <= SKIPS_LOGGED:
            log.warning(
                "journal: skipping a line that is not an entry agentctl wrote (%s) at byte %d; readers ignore it",
                reason,
                offset,
                extra={"path": str(self._path), "offset": offset, "reason": reason},
            )
        if reported == SKIPS_LOGGED:
            log.warning(
                "journal: further skipped lines are counted in agentctl_journal_lines_skipped_total, not logged",
                extra={"path": str(self._path)},
            )
        if self._on_skip is not None:
            self._on_skip(reason)

    def _report_new(self, offset: int, reason: str) -> None:
        """A reader's report: only of a line neither the recovery nor an earlier reader reported."""
        with self._lock:
            if (
                offset < self._reported_below
                or offset in self._reported
                or len(self._reported) >= SKIPS_TRACKED
            ):
                return
            self._reported.add(offset)
        self._report(offset, reason)

    def _index(self, seq: int, offset: int) -> None:
        with self._lock:
            seqs, offsets = self._index_seqs, self._index_offsets
            if seqs and seq - seqs[-1] < INDEX_STRIDE_ENTRIES and offset - offsets[-1] < INDEX_STRIDE_BYTES:
                return
            seqs.append(seq)
            offsets.append(offset)

    def _start(self, after: int) -> _Cursor:
        """Where a read of the entries after `after` begins: at the last indexed entry up to seq after + 1."""
        with self._lock:
            point = bisect.bisect_right(self._index_seqs, after + 1) - 1
            if point < 0:
                return _Cursor()
            seq = self._index_seqs[point]
            # An indexed line was an entry when it was indexed: read from it as a reader that just got seq - 1.
            return _Cursor(self._index_offsets[point], seq - 1, 0)

    def append(self, kind: str, notification: dict[str, Any]) -> Stored:
        entry: Entry = {
            "seq": self._last_seq + 1,
            "timestamp": utc_now(),
            "kind": kind,
            "notification": notification,
        }
        text = fit(entry)
        data = text.encode() + b"\n"
        fd = self._file.fileno()
        size = os.fstat(fd).st_size
        if size != self._size:
            # Someone else wrote to the file. This entry starts on a line of its own, so that bytes left without
            # a newline cannot swallow it; readers skip theirs.
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            if size < self._size:
                with self._lock:  # the file was cut: the index points past its end
                    del self._index_seqs[:], self._index_offsets[:]
        self._file.write(data)
        self._file.flush()
        self._size = size + len(data)
        self._last_seq += 1
        self._last_timestamp = entry["timestamp"]
        self._index(self._last_seq, self._size - len(text) - 1)
        return Stored(self._last_seq, kind, text)

    def entries(
        self, after: int = 0, upto: int | None = None, cursor: _Cursor | None = None
    ) -> Generator[Stored, None, None]:
        """Entries with after < seq <= upto (default: the last one now), oldest first, one line in memory at a
        time. Blocking: call it in a thread."""
        upto = self._last_seq if upto is None else upto
        if upto <= after:
            return
        if cursor is None:
            cursor = self._start(after)
        with self._path.open("rb") as f:
            for _, _, stored in self._scan(f, cursor, self._report_new):
                if stored.seq > upto:
                    return  # an append after the read began
                if stored.seq > after:
                    yield stored
                if stored.seq == upto:
                    return

    def _batch(self, cursor: _Cursor, after: int, upto: int) -> tuple[list[Stored], bool]:
        """The next entries of a read from `cursor`, about READ_CHUNK_BYTES of them; True once the read is done."""
        batch: list[Stored] = []
        size = 0
        with contextlib.closing(self.entries(after, upto, cursor)) as entries:
            for stored in entries:
                batch.append(stored)
                size += stored.size
                if size >= READ_CHUNK_BYTES:
                    return batch, False
        return batch, True

    async def stream(self, after: int, upto: int | None = None) -> AsyncGenerator[Stored, None]:
        """`entries`, read a batch at a time in a thread: the caller holds one batch, never the whole range."""
        upto = self._last_seq if upto is None else upto
        if upto <= after:
            return
        cursor = self._start(after)
        done = False
        while not done:
            batch, done = await asyncio.to_thread(self._batch, cursor, after, upto)
            for stored in batch:
                yield stored

    def has_entries(self) -> bool:
        return self._last_seq > 0

    def close(self) -> None:
        self._file.close()
