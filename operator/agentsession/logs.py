"""Structured logging for every entry point: one JSON object per line with `json`, plain text otherwise."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from agentsession.api.times import format_time

# Attributes every LogRecord has; anything else was passed through `extra=` and belongs in the JSON object.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": format_time(datetime.fromtimestamp(record.created, UTC), "milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(
            {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        )
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is one line per request: kept out of the way unless asked for.
    logging.getLogger("aiohttp.access").setLevel(max(logging.WARNING, root.level))
