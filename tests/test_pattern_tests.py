"""Pattern tests, the pure parts: reading cases (with file:line problems), every assertion
passing and failing, the runner's statuses and the JUnit file a CI system parses."""

from __future__ import annotations

import hashlib
from pathlib import Path

import junitparser
import pytest

from app.catalog import PatternCatalog
from app.errors import InvalidPatternTests, MissingVariables
from app.release import (
    LiveAnswer,
    SuiteReport,
    case_request,
    load_pattern_cases,
    parse_cases,
    run_cases,
    write_junit,
)
from app.release.assertions import (
    check_answer,
    check_prompt,
    check_verdict,
    has_answer_checks,
    prompt_text,
)
from app.schemas import Message, RenderedPrompt, TemplateRef
from app.schemas.pattern_tests import CaseExpectations, PatternTestCase
from tests.support import SHIPPED_PATTERNS

PATTERN = "---\ndescription: Greet.\n{extra}---\nHello {{{{ customer }}}}.\n"


def expect(**kwargs: object) -> CaseExpectations:
    return CaseExpectations.model_validate(kwargs)


def case(name: str = "c", **expectations: object) -> PatternTestCase:
    return PatternTestCase(name=name, expect=expect(**expectations))


# --- the rendered prompt and its hash -------------------------------------------------------


def test_the_prompt_text_is_system_then_messages_blank_line_apart() -> None:
    prompt = RenderedPrompt(
        system="Be brief.",
        messages=[
            Message(role="user", content="Hi"),
            Message(role="assistant", content="Hello"),
            Message(role="user", content="Where is my order?"),
        ],
    )
    assert prompt_text(prompt) == "Be brief.\n\nHi\n\nHello\n\nWhere is my order?"
    no_system = RenderedPrompt(system="", messages=[Message(role="user", content="Hi")])
    assert prompt_text(no_system) == "Hi"


def test_prompt_hash_is_the_sha256_of_the_utf8_text() -> None:
    text = "Olá Ana\n\nWhere is my order?"
    wanted = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert check_prompt(expect(prompt_hash=wanted), text) == []
    [failure] = check_prompt(expect(prompt_hash="sha256:" + "0" * 64), text)
    assert failure == f"prompt hash is {wanted}, expected sha256:{'0' * 64}"


# --- every assertion, passing and failing ---------------------------------------------------

PROMPT = "Hello Ana.\n\nWhere is my order?"


@pytest.mark.parametrize(
    ("expectations", "failure"),
    [
        ({"prompt_contains": ["Ana"]}, None),
        ({"prompt_contains": ["Bob"]}, "prompt does not contain 'Bob'"),
        ({"prompt_not_contains": ["Bob"]}, None),
        ({"prompt_not_contains": "Ana"}, "prompt contains 'Ana', which it must not"),
        ({"prompt_equals": PROMPT}, None),
        (
            {"prompt_equals": "Hello Bob."},
            "prompt differs from prompt_equals at character 6: got 'Ana.\\n\\nWhere is my "
            "order?', expected 'Bob.'",
        ),
        ({"prompt_matches": [r"order\?$"]}, None),
        ({"prompt_matches": [r"^Bye"]}, "prompt does not match /^Bye/"),
    ],
)
def test_prompt_assertions(expectations: dict[str, object], failure: str | None) -> None:
    assert check_prompt(expect(**expectations), PROMPT) == ([failure] if failure else [])


ANSWER = '{"order": "4471", "status": "shipped"}'
SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "status": {"enum": ["shipped", "lost"]}},
    "required": ["order", "status"],
}


@pytest.mark.parametrize(
    ("expectations", "answer", "failure"),
    [
        ({"answer_contains": ["4471"]}, ANSWER, None),
        ({"answer_contains": ["refund"]}, ANSWER, "answer does not contain 'refund'"),
        ({"answer_matches": [r'"order": "\d+"']}, ANSWER, None),
        ({"answer_matches": [r"^Dear"]}, ANSWER, "answer does not match /^Dear/"),
        ({"answer_schema": SCHEMA}, ANSWER, None),
        (
            {"answer_schema": SCHEMA},
            '{"order": 4471, "status": "shipped"}',
            "answer does not satisfy answer_schema at $.order: 4471 is not of type 'string'",
        ),
        (
            {"answer_schema": SCHEMA},
            "Your order shipped.",
            "answer is not JSON (Expecting value at character 0), so answer_schema fails",
        ),
        ({"answer_max_chars": 100}, ANSWER, None),
        (
            {"answer_max_chars": 10},
            ANSWER,
            f"answer is {len(ANSWER)} characters, over answer_max_chars 10",
        ),
    ],
)
def test_answer_assertions(
    expectations: dict[str, object], answer: str, failure: str | None
) -> None:
    assert check_answer(expect(**expectations), answer) == ([failure] if failure else [])


def test_a_judge_passes_only_an_answer_starting_with_pass() -> None:
    assert check_verdict("grade", "  PASS: it names the order") == []
    assert check_verdict("grade", "FAIL: no order number\nmore") == [
        "judge 'grade' did not answer PASS: 'FAIL: no order number'"
    ]


# --- the runner ------------------------------------------------------------------------------


async def render_ok(_: PatternTestCase) -> str:
    return PROMPT


async def answer_ok(_: PatternTestCase) -> LiveAnswer:
    return LiveAnswer(text="Your order 4471 has shipped.", job_id="f" * 32)


async def test_a_non_live_run_skips_answer_assertions_and_counts_them() -> None:
    cases = [
        case("prompt only", prompt_contains=["Ana"]),
        case("answer too", prompt_contains=["Ana"], answer_contains=["4471"]),
        case("wrong prompt", prompt_contains=["Bob"], answer_contains=["4471"]),
    ]
    report = await run_cases(cases, render=render_ok, suite="greet")
    assert [(c.name, c.status) for c in report.cases] == [
        ("prompt only", "passed"),
        ("answer too", "skipped"),
        ("wrong prompt", "failed"),
    ]
    assert (report.total, report.passed, report.failed, report.skipped) == (3, 1, 1, 1)
    assert not report.live and not report.ok
    assert report.failure_messages() == ["case 'wrong prompt': prompt does not contain 'Bob'"]


async def test_a_live_run_checks_the_answer_and_names_its_job() -> None:
    cases = [
        case("ships", answer_contains=["4471"]),
        case("refund", answer_contains=["refund"]),
    ]
    report = await run_cases(cases, render=render_ok, answer=answer_ok)
    assert report.live
    assert [(c.status, c.messages, c.job_id) for c in report.cases] == [
        ("passed", [], "f" * 32),
        ("failed", ["answer does not contain 'refund'"], "f" * 32),
    ]


async def test_a_judge_grades_the_live_answer_and_is_missing_outside_a_service() -> None:
    seen: list[tuple[str, str, str]] = []

    async def judge(name: str, graded: PatternTestCase, answer: str) -> str:
        seen.append((name, graded.name, answer))
        return "PASS" if "4471" in answer else "FAIL"

    cases = [case("graded", judge="grade_answer")]
    report = await run_cases(cases, render=render_ok, answer=answer_ok, judge=judge)
    assert report.cases[0].status == "passed"
    assert seen == [("grade_answer", "graded", "Your order 4471 has shipped.")]
    alone = await run_cases(cases, render=render_ok, answer=answer_ok)
    assert alone.cases[0].messages == ["judge 'grade_answer' cannot run here: no judge was given"]


async def test_a_render_error_is_a_failed_case_never_a_crash() -> None:
    async def broken(_: PatternTestCase) -> str:
        raise MissingVariables("greet", ["customer"])

    report = await run_cases([case("needs a customer")], render=broken)
    [only] = report.cases
    assert only.status == "failed"
    assert only.messages == [
        "render failed: missing_variables: Pattern 'greet' needs these variables: customer"
    ]


def test_case_request_serves_patterns_and_template_versions_alike() -> None:
    one = PatternTestCase(name="x", variables={"customer": "Ana"}, user_prompt="Hi")
    by_pattern = case_request(one, pattern="greet", model="openai/gpt-4o-mini")
    assert (by_pattern.pattern_key, by_pattern.variables, by_pattern.user_prompt) == (
        "greet",
        {"customer": "Ana"},
        "Hi",
    )
    assert by_pattern.model == "openai/gpt-4o-mini"
    by_version = case_request(one, template=TemplateRef(name="greet", role="system", version=2))
    assert by_version.pattern_key is None and by_version.template is not None


# --- reading cases ---------------------------------------------------------------------------


def write_pattern(root: Path, *, front: str = "", tests: str | None = None) -> Path:
    path = root / "greet.md"
    path.write_text(PATTERN.format(extra=front))
    if tests is not None:
        (root / "greet.tests.yaml").write_text(tests)
    return path


def test_cases_come_from_the_front_matter_then_the_tests_file(tmp_path: Path) -> None:
    front = "tests:\n  - name: from the front-matter\n    variables: {customer: Ana}\n"
    tests = "- name: from the file\n  variables: {customer: Bob}\n"
    path = write_pattern(tmp_path, front=front, tests=tests)
    assert [c.name for c in load_pattern_cases(path)] == ["from the front-matter", "from the file"]
    # The catalog takes neither the tests file for a pattern nor `tests:` for a typo.
    catalog = PatternCatalog(tmp_path)
    assert catalog.names() == ["greet"]
    assert catalog.check() == {}


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    tests = (
        "- name: fine\n  variables: {customer: Ana}\n- name: broken\n  variables: {customer: [\n"
    )
    path = write_pattern(tmp_path, tests=tests)
    with pytest.raises(InvalidPatternTests) as caught:
        load_pattern_cases(path)
    [problem] = caught.value.problems
    assert problem.startswith(f"{tmp_path / 'greet.tests.yaml'}:5: YAML syntax error: ")
    assert "\n" not in caught.value.message


def test_a_syntax_error_in_the_front_matter_counts_lines_from_the_files_top(
    tmp_path: Path,
) -> None:
    path = write_pattern(tmp_path, front="tests:\n  - name: a: b\n")
    with pytest.raises(InvalidPatternTests) as caught:
        load_pattern_cases(path)
    assert caught.value.problems[0].startswith(f"{path}:4: YAML syntax error")


def test_a_misspelt_assertion_points_at_its_line(tmp_path: Path) -> None:
    tests = (
        "- name: first\n"
        "  expect: {prompt_contains: [Ana]}\n"
        "- name: second\n"
        "  expect:\n"
        "    prompt_contains: [Ana]\n"
        "    answer_contain: [order]\n"
    )
    path = write_pattern(tmp_path, tests=tests)
    with pytest.raises(InvalidPatternTests) as caught:
        load_pattern_cases(path)
    assert caught.value.problems == [
        f"{tmp_path / 'greet.tests.yaml'}:6: case 'second': expect.answer_contain: "
        "Extra inputs are not permitted"
    ]


@pytest.mark.parametrize(
    ("tests", "problem"),
    [
        ("- name: a\n- name: a\n", "2: case 'a': the name is already used by the case at line 1"),
        ("name: a\n", "1: the tests must be a list of cases"),
        (
            "- name: a\n  expect:\n    prompt_matches: ['(']\n",
            "3: case 'a': expect.prompt_matches.0: bad regular expression: missing ), "
            "unterminated subpattern at position 0",
        ),
        (
            "- name: a\n  expect:\n    answer_schema: {type: 12}\n",
            "3: case 'a': expect.answer_schema: not a JSON Schema: ",
        ),
    ],
)
def test_bad_cases_are_refused_with_their_line(tmp_path: Path, tests: str, problem: str) -> None:
    with pytest.raises(InvalidPatternTests) as caught:
        parse_cases(tests, source="greet.tests.yaml")
    assert caught.value.problems[0].startswith(f"greet.tests.yaml:{problem}")
    assert caught.value.status_code == 422
    assert caught.value.error_type == "invalid_pattern_tests"


def test_a_case_defined_in_both_places_is_refused(tmp_path: Path) -> None:
    path = write_pattern(tmp_path, front="tests:\n  - name: twice\n", tests="- name: twice\n")
    with pytest.raises(InvalidPatternTests) as caught:
        load_pattern_cases(path)
    assert caught.value.problems == [
        f"{tmp_path / 'greet.tests.yaml'}:1: case 'twice': the name is already used at {path}:4"
    ]


def test_a_pattern_without_cases_has_none(tmp_path: Path) -> None:
    assert load_pattern_cases(write_pattern(tmp_path)) == []
    assert load_pattern_cases(write_pattern(tmp_path, tests="")) == []


# --- JUnit -----------------------------------------------------------------------------------


async def test_junit_output_parses_with_a_suite_per_pattern(tmp_path: Path) -> None:
    greet = await run_cases(
        [
            case("passes", prompt_contains=["Ana"]),
            case("fails", prompt_contains=["Bob"], prompt_not_contains=["Ana"]),
            case("live only", answer_contains=["x"]),
        ],
        render=render_ok,
        suite="greet",
    )
    other = SuiteReport.of("email/reply", live=False, cases=[])
    target = tmp_path / "junit.xml"
    write_junit([greet, other], target)

    xml = junitparser.JUnitXml.fromfile(str(target))
    suites = {suite.name: suite for suite in xml}
    assert set(suites) == {"greet", "email/reply"}
    suite = suites["greet"]
    assert (suite.tests, suite.failures, suite.skipped, suite.errors) == (3, 1, 1, 0)
    results = {tc.name: tc.result for tc in suite}
    assert results["passes"] == []
    [failure] = results["fails"]
    assert isinstance(failure, junitparser.Failure)
    assert failure.message == "prompt does not contain 'Bob'"
    assert failure.text == "prompt does not contain 'Bob'\nprompt contains 'Ana', which it must not"
    [skipped] = results["live only"]
    assert isinstance(skipped, junitparser.Skipped)
    assert suites["email/reply"].tests == 0


def test_every_shipped_pattern_carries_prompt_cases_and_a_live_case() -> None:
    catalog = PatternCatalog(SHIPPED_PATTERNS)
    assert catalog.names()
    for name in catalog.names():
        cases = load_pattern_cases(SHIPPED_PATTERNS / f"{name}.md")
        live = [c for c in cases if has_answer_checks(c.expect)]
        assert len(cases) - len(live) >= 2, name
        assert live, name
