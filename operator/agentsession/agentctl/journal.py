"""Append-only history of everything the clients see, on the workspace volume.

Each line is one JSON entry `{"seq", "timestamp", "kind", "notification"}`. The file outlives agentctl and the
agent, so `seq` continues where the last process stopped and a reader can ask for everything after a seq.
A random id, kept beside the file and new whenever the file is, lets a reader that remembers a seq tell the
journal it followed from a fresh one (a new workspace) whose seqs start again at 1.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from agentsession.agentctl.clock import utc_now

log = logging.getLogger(__name__)

Entry = dict[str, Any]


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


class Journal:
    def __init__(self, path: Path) -> None:
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._id = self._identity(fresh=not path.exists())
        # The session of a turn the file shows begun and never ended, as the last process left it.
        self.unfinished_turn: str | None = None
        self._last_seq, self._last_timestamp = self._recover()
        # Appends are a few hundred bytes; a synchronous write to the page cache is cheaper than a thread hop
        # and keeps the order of entries identical to the order of the agent's messages.
        self._file = path.open("a", encoding="utf-8")

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

    def _recover(self) -> tuple[int, str | None]:
        """Find the last seq, dropping a torn final line left by a crash mid-write."""
        if not self._path.exists():
            return 0, None
        last = 0
        last_timestamp: str | None = None
        good_size = 0
        with self._path.open("rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                try:
                    entry = json.loads(raw)
                    last, last_timestamp = int(entry["seq"]), str(entry["timestamp"])
                except (ValueError, KeyError, TypeError):
                    break
                self.unfinished_turn = _turn_after(entry, self.unfinished_turn)
                good_size += len(raw)
        if good_size != self._path.stat().st_size:
            log.warning(
                "journal: truncating damaged tail", extra={"path": str(self._path), "size": good_size}
            )
            os.truncate(self._path, good_size)
        return last, last_timestamp

    def append(self, kind: str, notification: dict[str, Any]) -> Entry:
        entry: Entry = {
            "seq": self._last_seq + 1,
            "timestamp": utc_now(),
            "kind": kind,
            "notification": notification,
        }
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._file.flush()
        self._last_seq += 1
        self._last_timestamp = entry["timestamp"]
        return entry

    def read(self, after: int = 0, upto: int | None = None, limit: int | None = None) -> list[Entry]:
        """Entries with after < seq <= upto, oldest first. Blocking: call it in a thread."""
        upto = self._last_seq if upto is None else upto
        out: list[Entry] = []
        if upto <= after:
            return out
        with self._path.open("rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # an append still in flight
                entry = json.loads(raw)
                seq = entry["seq"]
                if seq <= after:
                    continue
                if seq > upto:
                    break
                out.append(entry)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def has_entries(self) -> bool:
        return self._last_seq > 0

    def close(self) -> None:
        self._file.close()
