"""Identifiers of messages and tool calls derived from the conversation, so replays of a test see the same ids."""

from __future__ import annotations

import hashlib


def stable_id(prefix: str, *parts: object) -> str:
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()
    return f"{prefix}{digest[:24]}"
