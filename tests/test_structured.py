"""Tests for structured-output validation and repair feedback (app.prompts.structured)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.prompts.structured import REPAIR_ACTION, repair_feedback, validate_output
from app.schemas import MissingValue

PERSON = {
    "type": "object",
    "required": ["name", "age", "address"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "role": {"enum": ["admin", "user"]},
        "address": {
            "type": "object",
            "required": ["street", "city"],
            "additionalProperties": False,
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        },
    },
}
VALID_PERSON = {"name": "Ada", "age": 36, "address": {"street": "1 Main St", "city": "London"}}


def person(**changes: Any) -> dict[str, Any]:
    return {**VALID_PERSON, **changes}


# --- valid replies ------------------------------------------------------------------------


def test_valid_json_passes_with_parsed_set() -> None:
    result = validate_output(PERSON, json.dumps(VALID_PERSON))
    assert result.valid
    assert result.issue_count == 0
    assert result.parsed == VALID_PERSON


@pytest.mark.parametrize(
    "template",
    ["```json\n{}\n```", "```\n{}\n```", "  ```json\n{}\n```  \n", "```json  \n{}\n  ```"],
)
def test_json_inside_a_code_fence_is_accepted(template: str) -> None:
    text = template.replace("{}", json.dumps(VALID_PERSON, indent=2))
    result = validate_output(PERSON, text)
    assert result.valid
    assert result.parsed == VALID_PERSON


def test_an_already_parsed_payload_is_validated_without_parsing_text() -> None:
    result = validate_output(PERSON, "this text is not JSON", payload=VALID_PERSON)
    assert result.valid
    assert result.parsed == VALID_PERSON


def test_an_already_parsed_invalid_payload_reports_its_issues() -> None:
    result = validate_output(PERSON, json.dumps(VALID_PERSON), payload=person(age="old"))
    assert not result.valid
    assert [issue.field for issue in result.issues.invalid] == ["age"]


# --- not JSON -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["Sure! Here is the answer.", "", None, "{'a': 1}", "{} {}"])
def test_non_json_is_a_single_invalid_issue_at_the_root(text: str | None) -> None:
    result = validate_output(PERSON, text)
    assert not result.valid
    assert result.parsed is None
    assert result.issue_count == 1
    assert result.issues.missing == [] and result.issues.unknown == []
    (issue,) = result.issues.invalid
    assert issue.field == "$"
    assert issue.provided == (text or "")
    assert issue.problem.startswith("not valid JSON")
    assert issue.requirement == "a single JSON value"


# --- classification -----------------------------------------------------------------------


def test_missing_required_fields_are_classified_missing() -> None:
    reply = {"address": {"street": "1 Main St", "city": "London"}}
    result = validate_output(PERSON, json.dumps(reply))
    assert sorted(i.field for i in result.issues.missing) == ["age", "name"]
    assert all(i.requirement == "required" for i in result.issues.missing)
    assert result.issues.invalid == [] and result.issues.unknown == []
    assert result.issue_count == 2


def test_each_missing_field_is_reported_once() -> None:
    result = validate_output(PERSON, "{}")
    assert [m.model_dump() for m in result.issues.missing] == [
        {"field": "name", "requirement": "required"},
        {"field": "age", "requirement": "required"},
        {"field": "address", "requirement": "required"},
    ]
    assert result.issue_count == 3


def test_missing_nested_fields_get_dotted_paths() -> None:
    result = validate_output(PERSON, json.dumps(person(address={"street": "1 Main St"})))
    assert result.issues.missing == [MissingValue(field="address.city")]


def test_missing_fields_inside_arrays_include_the_index() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {"type": "object", "required": ["id"]},
            }
        },
    }
    result = validate_output(schema, json.dumps({"items": [{"id": 1}, {}]}))
    assert result.issues.missing == [MissingValue(field="items.1.id")]


def test_additional_properties_are_classified_unknown_with_paths() -> None:
    reply = person(nickname="A", address={"street": "s", "city": "c", "zip": "123"})
    result = validate_output(PERSON, json.dumps(reply))
    assert sorted(result.issues.unknown) == ["address.zip", "nickname"]
    assert result.issues.invalid == [] and result.issues.missing == []
    assert result.issue_count == 2


def test_several_unknown_keys_in_one_object_are_each_reported_once() -> None:
    result = validate_output(PERSON, json.dumps(person(b=1, a=2)))
    assert result.issues.unknown == ["b", "a"]
    assert result.issue_count == 2


def test_keys_matching_pattern_properties_are_not_unknown() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": False,
    }
    result = validate_output(schema, json.dumps({"a": 1, "x-trace": "t", "zz": 2}))
    assert result.issues.unknown == ["zz"]


@pytest.mark.parametrize(
    ("reply", "field", "provided", "validator", "problem_part"),
    [
        (person(age="thirty"), "age", "thirty", "type", "is not of type 'integer'"),
        (person(age=-1), "age", -1, "minimum", "less than the minimum of 0"),
        (person(role="owner"), "role", "owner", "enum", "is not one of"),
        (person(address={"street": 5, "city": "c"}), "address.street", 5, "type", "'string'"),
    ],
)
def test_wrong_values_are_invalid_with_field_provided_problem_requirement(
    reply: dict[str, Any], field: str, provided: Any, validator: str, problem_part: str
) -> None:
    result = validate_output(PERSON, json.dumps(reply))
    assert result.issues.missing == [] and result.issues.unknown == []
    (issue,) = result.issues.invalid
    assert set(issue.model_dump()) == {"field", "provided", "problem", "requirement"}
    assert issue.field == field
    assert issue.provided == provided
    assert problem_part in issue.problem
    assert issue.requirement.startswith(f"{validator}: ")


def test_requirement_states_the_schema_value_as_json() -> None:
    result = validate_output(PERSON, json.dumps(person(role="owner")))
    (issue,) = result.issues.invalid
    assert issue.requirement == 'enum: ["admin", "user"]'


def test_all_three_kinds_are_reported_together() -> None:
    reply = {"name": 7, "age": 1, "extra": True}
    result = validate_output(PERSON, json.dumps(reply))
    assert [i.field for i in result.issues.invalid] == ["name"]
    assert [i.field for i in result.issues.missing] == ["address"]
    assert result.issues.unknown == ["extra"]
    assert result.issue_count == 3
    assert not result.valid


def test_a_wrong_root_type_is_invalid_at_the_root() -> None:
    result = validate_output(PERSON, "[1, 2]")
    assert [i.field for i in result.issues.invalid] == ["$"]
    assert result.parsed == [1, 2]


@pytest.mark.parametrize(
    "long_value",
    ["x" * 5000, ["item"] * 1000],
)
def test_long_provided_values_are_shortened(long_value: Any) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "integer"}}}
    result = validate_output(schema, json.dumps({"v": long_value}))
    (issue,) = result.issues.invalid
    provided = issue.provided
    assert isinstance(provided, str)
    assert provided.endswith("…")
    assert len(provided) <= 201
    assert issue.problem == "the provided value is not of type 'integer'"
    assert len(issue.model_dump_json()) < 400


def test_long_non_json_text_is_shortened() -> None:
    result = validate_output(PERSON, "no json here " * 100)
    (issue,) = result.issues.invalid
    assert issue.provided.endswith("…")
    assert len(issue.provided) <= 201


def test_short_provided_values_are_kept_as_they_are() -> None:
    result = validate_output(PERSON, json.dumps(person(age=[1, 2])))
    (issue,) = result.issues.invalid
    assert issue.provided == [1, 2]


# --- repair feedback ----------------------------------------------------------------------


FAILING_REPLIES = [
    "not json at all",
    json.dumps({"age": -3, "role": "root", "extra": 1, "address": {"street": 1}}),
    json.dumps(person(address={"city": "c"})),
    json.dumps(person(unexpected="value")),
]


@pytest.mark.parametrize("reply", FAILING_REPLIES)
def test_repair_feedback_is_json_with_keys_in_order_and_action_last(reply: str) -> None:
    validation = validate_output(PERSON, reply)
    feedback = json.loads(repair_feedback(validation))
    assert list(feedback) == ["result", "issues", "issue_count", "action"]
    assert feedback["action"] == REPAIR_ACTION


@pytest.mark.parametrize("reply", FAILING_REPLIES)
def test_repair_feedback_issue_count_equals_the_number_of_issues(reply: str) -> None:
    feedback = json.loads(repair_feedback(validate_output(PERSON, reply)))
    issues = feedback["issues"]
    total = len(issues["invalid"]) + len(issues["missing"]) + len(issues["unknown"])
    assert total > 0
    assert feedback["issue_count"] == total


def test_repair_feedback_carries_every_classified_issue() -> None:
    validation = validate_output(
        PERSON, json.dumps({"age": "x", "address": {"street": "s", "city": "c"}, "bogus": 1})
    )
    issues = json.loads(repair_feedback(validation))["issues"]
    assert [i["field"] for i in issues["invalid"]] == ["age"]
    assert [i["field"] for i in issues["missing"]] == ["name"]
    assert issues["unknown"] == ["bogus"]


@pytest.mark.parametrize("reply", FAILING_REPLIES)
def test_repair_feedback_never_says_try_again(reply: str) -> None:
    text = repair_feedback(validate_output(PERSON, reply))
    assert not re.search(r"try\s+again", text, re.IGNORECASE)
    assert not re.search(r"try\s+again", REPAIR_ACTION, re.IGNORECASE)


def test_repair_feedback_keeps_non_ascii_readable() -> None:
    text = repair_feedback(validate_output(PERSON, "Voilà — pas de JSON"))
    assert "Voilà — pas de JSON" in text


# --- property: anything that satisfies the schema round-trips -----------------------------


SIMPLE: dict[str, Any] = {
    "type": "object",
    "required": ["id", "title", "done"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "integer", "minimum": 0},
        "title": {"type": "string", "maxLength": 40},
        "done": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "priority": {"enum": ["low", "high"]},
    },
}

simple_objects = st.fixed_dictionaries(
    {
        "id": st.integers(min_value=0, max_value=2**63),
        "title": st.text(max_size=40),
        "done": st.booleans(),
    },
    optional={
        "tags": st.lists(st.text(max_size=10), max_size=5),
        "priority": st.sampled_from(["low", "high"]),
    },
)


@given(obj=simple_objects, indent=st.sampled_from([None, 2]), fenced=st.booleans())
def test_objects_satisfying_the_schema_validate_and_round_trip(
    obj: dict[str, Any], indent: int | None, fenced: bool
) -> None:
    text = json.dumps(obj, indent=indent)
    if fenced:
        text = f"```json\n{text}\n```"
    result = validate_output(SIMPLE, text)
    assert result.valid, result.issues
    assert result.parsed == obj


@given(obj=simple_objects, extra=st.text(min_size=1, max_size=10))
def test_any_key_outside_the_schema_is_reported_unknown(obj: dict[str, Any], extra: str) -> None:
    if extra in SIMPLE["properties"]:
        return
    result = validate_output(SIMPLE, json.dumps({**obj, extra: 1}))
    assert result.issues.unknown == [extra]
    assert result.issue_count == 1
