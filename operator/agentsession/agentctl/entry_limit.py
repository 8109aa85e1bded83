"""Journal entries at most ENTRY_MAX_BYTES: an entry the agent made larger is kept cut, and says so.

An agent can send one update of tens of MiB (a tool's whole output). Kept whole, every reader of the journal and
every subscriber would hold it, and a history page could not be bounded in bytes. So the entry is cut before it
is stored: its longest strings are shortened, all to the same length, until the entry fits (the short strings,
ids and kinds among them, stay whole), and the entry gets `"truncated": {"bytes": <its size as it came>}`. An
entry whose bulk is not in strings (a huge list of numbers, thousands of keys, nesting too deep to encode) keeps
only the short scalar fields of its first two levels.
"""

from __future__ import annotations

import bisect
import itertools
import json
from typing import Any

from agentsession.contract.wire import ENTRY_MAX_BYTES

Entry = dict[str, Any]

# The skeleton of an entry that string cuts cannot shrink: the fields it keeps, and how long a kept string may be.
SKELETON_FIELDS = 64
SKELETON_STRING = 256


def encode(value: Any) -> str:
    """The JSON of an entry as agentctl stores and serves it: compact and ASCII, so its length is its size."""
    return json.dumps(value, separators=(",", ":"))


def fit(entry: Entry, limit: int = ENTRY_MAX_BYTES) -> str:
    """The JSON text of `entry`, at most `limit` bytes: the entry itself when it fits, else cut and marked."""
    try:
        text = encode(entry)
    except RecursionError:
        return _skeleton_text(entry, _size(entry))
    if len(text) <= limit:
        return text
    original = len(text)
    marked = {**entry, "truncated": {"bytes": original}}
    excess = original + len(encode(marked["truncated"])) + len(',"truncated":') - limit
    cap = _cap(sorted(len(encode(s)) for s in _strings(entry["notification"])), excess)
    if cap is not None:
        try:
            text = encode({**marked, "notification": _cut(entry["notification"], cap)})
        except RecursionError:  # _cut takes more stack per level than the encoder
            return _skeleton_text(entry, original)
        if len(text) <= limit:
            return text
    return _skeleton_text(entry, original)


def _strings(value: Any) -> list[str]:
    """Every string value inside `value` (not the keys), without recursion."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _cap(lengths: list[int], excess: int) -> int | None:
    """The largest encoded length such that cutting every longer string (`lengths`: their encoded lengths,
    ascending) to it saves `excess` bytes; None if cutting them all to empty strings does not (the bulk is
    elsewhere)."""
    below = list(itertools.accumulate(lengths, initial=0))  # below[i]: the sum of the i shortest

    def saved(cap: int) -> int:
        shorter = bisect.bisect_right(lengths, cap)
        return below[-1] - below[shorter] - (len(lengths) - shorter) * cap

    low, high = len('""'), lengths[-1] if lengths else 0
    if saved(low) < excess:
        return None
    while low < high:  # saved() falls as the cap grows: find the largest cap that still saves enough
        middle = (low + high + 1) // 2
        if saved(middle) >= excess:
            low = middle
        else:
            high = middle - 1
    return low


def _cut(value: Any, cap: int) -> Any:
    if isinstance(value, str):
        return _cut_string(value, cap)
    if isinstance(value, dict):
        return {key: _cut(item, cap) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut(item, cap) for item in value]
    return value


def _cut_string(text: str, cap: int) -> str:
    """`text` shortened so that its JSON (quotes and escapes included) is at most `cap` long."""
    size = len(encode(text))
    keep = len(text)
    while size > cap and keep > 0:
        keep = min(keep - 1, keep * cap // size)
        size = len(encode(text[:keep]))
    return text[:keep]


def _size(value: Any) -> int:
    """The length of `value`'s JSON, counted without recursion (for an entry too deep to encode)."""
    size = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            size += 2 + max(0, len(item) - 1) + len(item)  # braces, commas, colons
            size += sum(len(encode(str(key))) for key in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            size += 2 + max(0, len(item) - 1)
            stack.extend(item)
        else:
            size += len(encode(item))
    return size


def _short_scalars(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    kept: dict[str, Any] = {}
    for key, item in list(value.items())[:SKELETON_FIELDS]:
        if len(key) > SKELETON_STRING:
            continue
        if isinstance(item, str):
            if len(item) <= SKELETON_STRING:
                kept[key] = item
        elif item is None or isinstance(item, bool | int | float):
            kept[key] = item
    return kept


def _skeleton_text(entry: Entry, original: int) -> str:
    notification = entry.get("notification")
    skeleton = _short_scalars(notification) or {}
    if isinstance(notification, dict):
        for key, item in list(notification.items())[:SKELETON_FIELDS]:
            inner = _short_scalars(item)
            if inner is not None and len(key) <= SKELETON_STRING:
                skeleton[key] = inner
    return encode({**entry, "notification": skeleton, "truncated": {"bytes": original}})
