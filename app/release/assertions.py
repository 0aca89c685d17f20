"""Checking one case: pure functions from a rendered prompt (and an answer) to failure messages.

The rendered prompt a case sees is the text of exactly what is sent: the system text and each
message's text, joined by a blank line ("\\n\\n"); an empty system text is left out. Its hash is
`sha256:` + the hex SHA-256 of that text's UTF-8 (docs/patterns.md, "Pattern tests").
Every failure is one sentence a person can act on: "prompt does not contain 'Ana'".
"""

from __future__ import annotations

import hashlib
import json
import re

from jsonschema import Draft202012Validator

from app.schemas import RenderedPrompt
from app.schemas.pattern_tests import CaseExpectations

PASS_WORD = "PASS"  # noqa: S105  # the verdict word, not a secret
_SHOWN = 60  # characters of a value shown in a message


def prompt_text(prompt: RenderedPrompt) -> str:
    """The text a case's prompt assertions read: system, then each message, blank-line apart."""
    parts = [prompt.system] if prompt.system else []
    parts += [message.text for message in prompt.messages]
    return "\n\n".join(parts)


def prompt_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _first_difference(actual: str, expected: str) -> str:
    at = next(
        (i for i, (a, b) in enumerate(zip(actual, expected, strict=False)) if a != b),
        min(len(actual), len(expected)),
    )
    return (
        f"prompt differs from prompt_equals at character {at}: "
        f"got {_shown(actual[at:])}, expected {_shown(expected[at:])}"
    )


def check_prompt(expect: CaseExpectations, text: str) -> list[str]:
    """Every prompt assertion that does not hold, in the order they are written."""
    failures = [
        f"prompt does not contain {_shown(s)}" for s in expect.prompt_contains if s not in text
    ]
    failures += [
        f"prompt contains {_shown(s)}, which it must not"
        for s in expect.prompt_not_contains
        if s in text
    ]
    if expect.prompt_equals is not None and text != expect.prompt_equals:
        failures.append(_first_difference(text, expect.prompt_equals))
    failures += [
        f"prompt does not match /{pattern}/"
        for pattern in expect.prompt_matches
        if re.search(pattern, text) is None
    ]
    if expect.prompt_hash is not None and (actual := prompt_hash(text)) != expect.prompt_hash:
        failures.append(f"prompt hash is {actual}, expected {expect.prompt_hash}")
    return failures


def has_answer_checks(expect: CaseExpectations) -> bool:
    """Whether the case asserts anything of an answer (such a case needs a live run)."""
    return bool(
        expect.answer_contains
        or expect.answer_matches
        or expect.answer_schema is not None
        or expect.answer_max_chars is not None
        or expect.judge is not None
    )


def _schema_failures(schema: dict[str, object], answer: str) -> list[str]:
    try:
        parsed = json.loads(answer)
    except json.JSONDecodeError as exc:
        return [f"answer is not JSON ({exc.msg} at character {exc.pos}), so answer_schema fails"]
    errors = sorted(Draft202012Validator(schema).iter_errors(parsed), key=lambda e: e.json_path)
    return [f"answer does not satisfy answer_schema at {e.json_path}: {e.message}" for e in errors]


def check_answer(expect: CaseExpectations, answer: str) -> list[str]:
    """Every answer assertion that does not hold, but the judge's (it needs a live call)."""
    failures = [
        f"answer does not contain {_shown(s)}" for s in expect.answer_contains if s not in answer
    ]
    failures += [
        f"answer does not match /{pattern}/"
        for pattern in expect.answer_matches
        if re.search(pattern, answer) is None
    ]
    if expect.answer_schema is not None:
        failures += _schema_failures(expect.answer_schema, answer)
    if expect.answer_max_chars is not None and len(answer) > expect.answer_max_chars:
        failures.append(
            f"answer is {len(answer)} characters, over answer_max_chars {expect.answer_max_chars}"
        )
    return failures


def check_verdict(judge: str, verdict: str) -> list[str]:
    """A judge passes the answer when its own answer starts with PASS."""
    if verdict.lstrip().startswith(PASS_WORD):
        return []
    first = verdict.strip().splitlines()[0] if verdict.strip() else "(empty)"
    return [f"judge {judge!r} did not answer PASS: {_shown(first)}"]
