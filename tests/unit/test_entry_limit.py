"""Journal entries at most ENTRY_MAX_BYTES: an entry that fits is kept as it is; a larger one is cut where its bulk
is (its longest strings), keeps what identifies it, and says how large it was."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentsession.agentctl.entry_limit import encode, fit
from agentsession.contract.wire import ENTRY_MAX_BYTES, JournalEntry

LIMIT = 10_000


def _entry(notification: dict[str, Any]) -> dict[str, Any]:
    return {
        "seq": 7,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "kind": "session_update",
        "notification": notification,
    }


def _chunk(text: Any) -> dict[str, Any]:
    return {
        "sessionId": "s1",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
    }


def _fitted(entry: dict[str, Any], limit: int = LIMIT) -> dict[str, Any]:
    text = fit(entry, limit)
    assert len(text) <= limit
    assert text.isascii()
    JournalEntry.model_validate_json(text)  # still an entry of the contract
    result: dict[str, Any] = json.loads(text)
    return result


@pytest.mark.parametrize("size", [0, 100, LIMIT - len(encode(_entry(_chunk(""))))])
def test_an_entry_that_fits_is_kept_as_it_is(size: int) -> None:
    entry = _entry(_chunk("x" * size))
    assert fit(entry, LIMIT) == encode(entry)
    assert "truncated" not in _fitted(entry)


def test_a_long_text_is_cut_to_fit_and_the_entry_says_how_large_it_was() -> None:
    entry = _entry(_chunk("x" * 50_000))
    cut = _fitted(entry)
    assert cut["truncated"] == {"bytes": len(encode(entry))}
    assert cut["notification"]["sessionId"] == "s1"
    assert cut["notification"]["update"]["sessionUpdate"] == "agent_message_chunk"
    text = cut["notification"]["update"]["content"]["text"]
    assert text == "x" * len(text)
    assert len(fit(entry, LIMIT)) > LIMIT - 100  # cut to the limit, not far below it


def test_the_longest_strings_are_cut_to_one_length_and_the_short_ones_stay_whole() -> None:
    notification = {"id": "call-1", "title": "t" * 200, "a": "a" * 30_000, "b": "b" * 20_000}
    cut = _fitted(_entry(notification))["notification"]
    assert (cut["id"], cut["title"]) == ("call-1", "t" * 200)
    assert len(cut["a"]) == len(cut["b"])
    assert 200 < len(cut["a"]) < 20_000


def test_text_that_escapes_into_longer_json_is_cut_by_its_encoded_length() -> None:
    """Each of these characters takes six bytes once escaped; the cut counts what is stored, not characters."""
    cut = _fitted(_entry(_chunk('é"\n\\' * 10_000)))
    assert cut["truncated"]["bytes"] > 10 * LIMIT


@pytest.mark.parametrize(
    "bulk",
    [
        list(range(5_000)),  # numbers
        {f"k{n}": n for n in range(2_000)},  # keys
        {"k" * 20_000: 1},  # one long key
    ],
    ids=["numbers", "many keys", "a long key"],
)
def test_an_entry_whose_bulk_is_not_in_strings_keeps_its_short_fields_only(bulk: Any) -> None:
    entry = _entry(
        {"sessionId": "s1", "update": {"sessionUpdate": "tool_call", "toolCallId": "c1", "bulk": bulk}}
    )
    cut = _fitted(entry)
    assert cut["notification"] == {
        "sessionId": "s1",
        "update": {"sessionUpdate": "tool_call", "toolCallId": "c1"},
    }
    assert cut["truncated"] == {"bytes": len(encode(entry))}


def test_an_entry_nested_too_deeply_to_encode_keeps_its_short_fields_and_its_size() -> None:
    deep: list[Any] = []
    inner = deep
    for _ in range(5_000):
        inner.append([])
        inner = inner[0]
    entry = _entry({"sessionId": "s1", "update": {"sessionUpdate": "x", "deep": deep}})
    cut = _fitted(entry)
    assert cut["notification"] == {"sessionId": "s1", "update": {"sessionUpdate": "x"}}
    assert cut["truncated"]["bytes"] > 5_000 * len("[]")


def test_the_default_limit_is_the_contract_s() -> None:
    text = fit(_entry(_chunk("z" * (4 * ENTRY_MAX_BYTES))))
    assert ENTRY_MAX_BYTES - 100 < len(text) <= ENTRY_MAX_BYTES
