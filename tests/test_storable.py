"""Rows every backend stores: NUL and lone surrogates escaped everywhere, the fields named."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from app.store.storable import storable


def test_refused_characters_are_escaped_in_text_nested_json_and_keys() -> None:
    row, escaped = storable(
        {
            "id": "j1",
            "response_redacted": "a\x00b\ud800c",
            "attempts": [{"response": "x", "issues": {"unknown": ["$.k\udc00"]}}],
            "params": {"stop\x00": ["ok"]},
            "latency_ms": 1.5,
            "error_message": None,
        }
    )
    assert row["response_redacted"] == "a\\u0000b\\ud800c"
    assert row["attempts"][0]["issues"]["unknown"] == ["$.k\\udc00"]
    assert row["params"] == {"stop\\u0000": ["ok"]}
    assert escaped == ["response_redacted", "attempts", "params"]
    assert (row["id"], row["latency_ms"], row["error_message"]) == ("j1", 1.5, None)


def test_a_clean_row_is_unchanged_and_nothing_is_named() -> None:
    clean = {"id": "j2", "text": "naïve ☃ 😀 \\u0000 as typed", "json": {"a": [1, "b"]}}
    assert storable(clean) == (clean, [])


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(codec=None)),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(codec=None), max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


def _has_refused(value: object) -> bool:
    if isinstance(value, str):
        return any(ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF for ch in value)
    if isinstance(value, dict):
        return any(_has_refused(key) or _has_refused(inner) for key, inner in value.items())
    if isinstance(value, list):
        return any(_has_refused(inner) for inner in value)
    return False


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), JSONISH))
def test_every_escaped_row_encodes_as_utf8_without_nul(row: dict[str, object]) -> None:
    stored, escaped = storable(row)
    json.dumps(stored, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    assert not _has_refused(stored)
    assert escaped == [name for name in row if _has_refused(row[name])]
