"""The demo agent's own record of each session, so session/load can replay it (like a real agent's store)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_SESSION_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def valid_session_id(session_id: str) -> bool:
    return bool(_SESSION_ID.match(session_id)) and session_id not in (".", "..")


class SessionFile:
    def __init__(self, cwd: str, session_id: str) -> None:
        self.path = Path(cwd) / ".demo-agent" / "sessions" / f"{session_id}.jsonl"

    def exists(self) -> bool:
        return self.path.is_file()

    def create(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()

    def append(self, update: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(update) + "\n")

    def updates(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out
