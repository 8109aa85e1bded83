"""The session agentctl last started, kept on the workspace so a restarted agentctl resumes it."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SessionRecord:
    session_id: str | None = None
    cwd: str | None = None
    mode_id: str | None = None
    prompt_sent: bool = False


class SessionStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        self.record = self._load()

    def _load(self) -> SessionRecord:
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise TypeError(f"a JSON object was expected, not {type(raw).__name__}")
            fields: dict[str, Any] = {k: raw.get(k) for k in SessionRecord.__dataclass_fields__}
            return SessionRecord(**fields)
        except FileNotFoundError:
            return SessionRecord()
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            # The file is in reach of the agent where the state dir is the workspace's: nested past the parser's
            # recursion, it is as unreadable as one that is not JSON.
            log.warning(
                "ignoring unreadable session state", extra={"path": str(self._path), "error": str(exc)}
            )
            return SessionRecord()

    def save(self) -> None:
        # Write-then-rename so a crash never leaves half a file behind.
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self.record)), encoding="utf-8")
        os.replace(tmp, self._path)
