"""Go-style durations ("1h30m", "90s"), the syntax the CRD accepts and CEL understands."""

from __future__ import annotations

import re

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration; raises ValueError naming the bad input."""
    parts = _PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"invalid duration {text!r}: use Go syntax such as '90s', '15m' or '1h30m'")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
