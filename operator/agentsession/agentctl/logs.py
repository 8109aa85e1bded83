"""Structured logging: one JSON object per line with --log-format json, plain text otherwise."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from agentsession.agentctl.clock import utc_now

# Attributes every LogRecord has; anything else was passed through `extra=` and belongs in the JSON object.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": utc_now(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiohttp's access log is one line per request; keep it at the chosen level but out of the way at INFO.
    logging.getLogger("aiohttp.access").setLevel(max(logging.WARNING, root.level))
