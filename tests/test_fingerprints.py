"""Fingerprints (`app.tracking`) and the Provenance they feed.

Every expected hash here is recomputed with `hashlib` from bytes written out by hand, so a
change to the canonical form shows up as a failure instead of being absorbed by the code
under test.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.catalog import PatternCatalog
from app.schemas import Provenance
from app.tracking import (
    RenderedFrom,
    build_provenance,
    canonical_json,
    pattern_content_hash,
    sha256_hex,
    user_prompt_hash,
    variables_hash,
)

FINGERPRINT = re.compile(r"^sha256:[0-9a-f]{64}$")


def expected(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Colour(enum.Enum):
    RED = "red"
    BLUE = 2


@dataclasses.dataclass
class Opaque:
    label: str

    def __str__(self) -> str:
        return f"opaque<{self.label}>"


# --- format -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fingerprint",
    [
        sha256_hex(b""),
        sha256_hex(b"\x00\xff binary"),
        pattern_content_hash(b"---\ndescription: x\n---\nbody\n"),
        variables_hash({}),
        variables_hash({"a": [1, 2, {"b": None}]}),
        user_prompt_hash(""),
        user_prompt_hash("héllo wörld"),
    ],
)
def test_every_fingerprint_is_sha256_prefix_and_64_lowercase_hex(fingerprint: str) -> None:
    assert FINGERPRINT.match(fingerprint), fingerprint


def test_sha256_hex_matches_hashlib_of_the_same_bytes() -> None:
    data = b"any bytes at all \x00\x01"
    assert sha256_hex(data) == expected(data)


def test_pattern_content_hash_covers_the_exact_file_bytes() -> None:
    raw = b"---\ndescription: d\n---\nHello {{ name }}\n"
    assert pattern_content_hash(raw) == expected(raw)
    # A single trailing byte (e.g. a newline an editor adds) is a different pattern file.
    assert pattern_content_hash(raw + b"\n") != pattern_content_hash(raw)


def test_user_prompt_hash_is_sha256_of_the_verbatim_utf8_text() -> None:
    prompt = "  Grüße, 世界!\n"
    assert user_prompt_hash(prompt) == expected(prompt.encode("utf-8"))
    # Verbatim: surrounding whitespace is part of the prompt, nothing is stripped.
    assert user_prompt_hash(prompt.strip()) != user_prompt_hash(prompt)


# --- canonical form ---------------------------------------------------------------------------


def test_variables_hash_known_value_is_compact_sorted_json_as_utf8() -> None:
    variables = {"zeta": 1, "alpha": [True, None, 2.5], "mid": {"y": "b", "x": "a"}}
    manual = b'{"alpha":[true,null,2.5],"mid":{"x":"a","y":"b"},"zeta":1}'
    assert canonical_json(variables) == manual.decode("utf-8")
    assert variables_hash(variables) == expected(manual)


def test_variables_hash_known_value_for_every_canonicalisation_rule() -> None:
    variables = {
        "path": Path("patterns") / "email" / "reply.md",
        "pure_path": PurePosixPath("/srv/p"),
        "enum_str": Colour.RED,
        "enum_int": Colour.BLUE,
        "when": dt.datetime(2024, 5, 17, 9, 30, 15, tzinfo=dt.UTC),
        "day": dt.date(2024, 5, 17),
        "clock": dt.time(9, 30),
        "tags": {"b", "c", "a"},
        "pair": (1, "x"),
        "other": Opaque("z"),
    }
    manual = (
        b'{"clock":"09:30:00","day":"2024-05-17","enum_int":2,"enum_str":"red",'
        b'"other":"opaque<z>","pair":[1,"x"],"path":"patterns/email/reply.md",'
        b'"pure_path":"/srv/p","tags":["a","b","c"],"when":"2024-05-17T09:30:15+00:00"}'
    )
    assert variables_hash(variables) == expected(manual)


@pytest.mark.parametrize(
    ("value", "json_text"),
    [
        (Path("a") / "b.md", '"a/b.md"'),
        (Colour.RED, '"red"'),
        (Colour.BLUE, "2"),
        (dt.datetime(2024, 1, 2, 3, 4, 5), '"2024-01-02T03:04:05"'),
        (dt.date(2024, 1, 2), '"2024-01-02"'),
        (dt.time(23, 59, 1), '"23:59:01"'),
        ({3, 1, 2}, "[1,2,3]"),
        (frozenset({"b", "a"}), '["a","b"]'),
        ((1, (2, 3)), "[1,[2,3]]"),
        (Opaque("q"), '"opaque<q>"'),
        ({"nested": {"when": dt.date(2000, 1, 1)}}, '{"nested":{"when":"2000-01-01"}}'),
    ],
)
def test_canonical_json_reduces_each_type_to_its_json_native_form(
    value: Any, json_text: str
) -> None:
    assert canonical_json(value) == json_text


def test_variables_hash_ignores_key_insertion_order() -> None:
    first = {"a": 1, "b": {"c": 2, "d": 3}}
    second = {"b": {"d": 3, "c": 2}, "a": 1}
    assert variables_hash(first) == variables_hash(second)


def test_variables_hash_depends_on_list_order() -> None:
    assert variables_hash({"k": [1, 2]}) != variables_hash({"k": [2, 1]})


def test_variables_hash_keeps_value_types_apart() -> None:
    hashes = {variables_hash({"k": v}) for v in (1, "1", 1.0, True, None, [1])}
    assert len(hashes) == 6


def test_non_ascii_text_is_hashed_as_utf8_not_as_json_escapes() -> None:
    variables = {"name": "Zoë", "city": "東京"}
    raw_utf8 = '{"city":"東京","name":"Zoë"}'.encode()
    escaped = b'{"city":"\\u6771\\u4eac","name":"Zo\\u00eb"}'
    assert canonical_json(variables) == raw_utf8.decode("utf-8")
    assert variables_hash(variables) == expected(raw_utf8)
    assert variables_hash(variables) != expected(escaped)


def test_a_set_of_numbers_hashes_like_the_numerically_sorted_list() -> None:
    # Lexical order of the JSON text would put 10 before 9; the sorted list does not.
    assert canonical_json({10, 9, 100}) == "[9,10,100]"
    assert variables_hash({"n": {10, 9, 100}}) == variables_hash({"n": [9, 10, 100]})


def test_a_set_of_strings_with_json_escaped_characters_hashes_like_the_sorted_list() -> None:
    items = {'a"', "a#", "a\\", "a!"}
    assert variables_hash({"s": items}) == variables_hash({"s": sorted(items)})


def test_a_set_of_mixed_types_has_one_stable_order() -> None:
    assert canonical_json({1, "1", None}) == canonical_json({None, "1", 1})
    assert canonical_json({1, "1", None}) == '["1",1,null]'


# --- properties -------------------------------------------------------------------------------

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
variable_maps = st.dictionaries(st.text(max_size=10), json_values, max_size=8)


@given(variable_maps, st.randoms(use_true_random=False))
def test_property_equal_dicts_in_any_insertion_order_hash_equal(
    variables: dict[str, Any], rnd: Any
) -> None:
    keys = list(variables)
    rnd.shuffle(keys)
    reordered = {key: variables[key] for key in keys}
    assert reordered == variables
    assert variables_hash(reordered) == variables_hash(variables)


@given(st.sets(st.integers()) | st.sets(st.text(max_size=12)) | st.sets(st.floats(allow_nan=False)))
def test_property_a_set_hashes_like_the_sorted_list_of_its_items(items: set[Any]) -> None:
    assert variables_hash({"items": items}) == variables_hash({"items": sorted(items)})
    assert variables_hash({"items": frozenset(items)}) == variables_hash({"items": sorted(items)})


@given(st.data(), variable_maps.filter(bool))
def test_property_changing_any_single_value_changes_the_hash(
    data: st.DataObject, variables: dict[str, Any]
) -> None:
    key = data.draw(st.sampled_from(sorted(variables)))
    new_value = data.draw(json_values)
    assume(new_value != variables[key])
    changed = {**variables, key: new_value}
    assert variables_hash(changed) != variables_hash(variables)


@given(st.text(), st.text())
def test_property_user_prompt_hash_differs_exactly_when_the_text_differs(a: str, b: str) -> None:
    assert (user_prompt_hash(a) == user_prompt_hash(b)) == (a == b)


# --- Provenance -------------------------------------------------------------------------------

PATTERN = "---\ndescription: Greets someone.\n---\nGreet {{ name }} in a {{ tone }} tone.\n"


@pytest.fixture
def adapter(tmp_path: Path) -> PatternCatalog:
    (tmp_path / "greet.md").write_text(PATTERN, encoding="utf-8")
    return PatternCatalog(base_path=tmp_path)


def provenance_for(
    adapter: PatternCatalog, variables: dict[str, Any], user_prompt: str
) -> Provenance:
    rendered = adapter.apply_template("greet", variables)
    pattern = rendered.pattern
    return build_provenance(
        RenderedFrom(
            name=pattern.name,
            base_path=pattern.base_path,
            content_hash=pattern.content_hash,
            variables=rendered.variables,
        ),
        user_prompt=user_prompt,
        provider="openai",
        model="gpt-4o-mini",
    )


def changed_fields(before: Provenance, after: Provenance) -> set[str]:
    old, new = before.model_dump(), after.model_dump()
    # prov-1 has every field but prov-2's continuation_hash, which it leaves out (and a
    # pattern's has no template_label).
    assert (
        old.keys()
        == new.keys()
        == set(Provenance.model_fields)
        - {
            "continuation_hash",
            "template_label",
        }
    )
    return {field for field in old if old[field] != new[field]}


def test_build_provenance_fills_every_field_from_its_inputs(
    adapter: PatternCatalog, tmp_path: Path
) -> None:
    variables = {"name": "Ana", "tone": "warm"}
    prov = provenance_for(adapter, variables, "Hello")
    raw = (tmp_path / "greet.md").read_bytes()
    assert prov == Provenance(
        schema_version="prov-1",
        pattern_name="greet",
        pattern_base_path=str(tmp_path),
        pattern_content_hash=expected(raw),
        variables_hash=expected(b'{"name":"Ana","tone":"warm"}'),
        user_prompt_hash=expected(b"Hello"),
        provider="openai",
        model="gpt-4o-mini",
    )


def test_changing_only_the_user_prompt_changes_only_user_prompt_hash(
    adapter: PatternCatalog,
) -> None:
    variables = {"name": "Ana", "tone": "warm"}
    before = provenance_for(adapter, variables, "Write to Ana.")
    after = provenance_for(adapter, variables, "Write to Ana!")
    assert changed_fields(before, after) == {"user_prompt_hash"}


def test_changing_only_one_variable_changes_only_variables_hash(adapter: PatternCatalog) -> None:
    before = provenance_for(adapter, {"name": "Ana", "tone": "warm"}, "Hi")
    after = provenance_for(adapter, {"name": "Ana", "tone": "formal"}, "Hi")
    assert changed_fields(before, after) == {"variables_hash"}


def test_changing_only_the_pattern_file_bytes_changes_only_pattern_content_hash(
    adapter: PatternCatalog, tmp_path: Path
) -> None:
    variables = {"name": "Ana", "tone": "warm"}
    before = provenance_for(adapter, variables, "Hi")
    # Same variables, same front-matter: only the body's wording (and so the bytes) changes.
    (tmp_path / "greet.md").write_text(PATTERN.replace("Greet", "Please greet"), encoding="utf-8")
    assert adapter.refresh() is True
    after = provenance_for(adapter, variables, "Hi")
    assert changed_fields(before, after) == {"pattern_content_hash"}
    assert after.pattern_content_hash == expected((tmp_path / "greet.md").read_bytes())


def test_provenance_fingerprints_effective_variables_with_defaults_merged(tmp_path: Path) -> None:
    (tmp_path / "greet.md").write_text(
        "---\ndescription: d\ndefaults:\n  tone: warm\n---\n{{ name }} {{ tone }}\n",
        encoding="utf-8",
    )
    adapter = PatternCatalog(base_path=tmp_path)
    implicit = provenance_for(adapter, {"name": "Ana"}, "Hi")
    explicit = provenance_for(adapter, {"name": "Ana", "tone": "warm"}, "Hi")
    assert implicit == explicit
    assert implicit.variables_hash == expected(b'{"name":"Ana","tone":"warm"}')


def test_provenance_is_frozen() -> None:
    prov = build_provenance(
        RenderedFrom(name="p", base_path="patterns", content_hash=sha256_hex(b"x"), variables={}),
        user_prompt="",
        provider="openai",
        model="m",
    )
    with pytest.raises(ValidationError):
        prov.model = "other"  # type: ignore[misc]
    assert prov.model == "m"


def test_provenance_rejects_extra_fields() -> None:
    fields = {
        "pattern_name": "p",
        "pattern_base_path": "patterns",
        "pattern_content_hash": sha256_hex(b"x"),
        "variables_hash": variables_hash({}),
        "user_prompt_hash": user_prompt_hash(""),
        "provider": "openai",
        "model": "m",
    }
    Provenance(**fields)  # the same fields without the extra one are accepted
    with pytest.raises(ValidationError, match="extra"):
        Provenance.model_validate({**fields, "smuggled": "value"})
