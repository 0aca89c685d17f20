"""Reading test cases: from a pattern's front-matter `tests:` and its `NAME.tests.yaml`.

Both places may hold cases; they are concatenated (front-matter first) and a case name may
appear only once. Every problem is reported as `FILE:LINE: problem`, the line found by walking
the YAML node tree along the failing field, so an author goes straight to it. The checks go
beyond the model's shape: regexes must compile and `answer_schema` must be a JSON Schema,
so a broken case fails when it is read, not with a confusing message when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from app.errors import InvalidPatternTests
from app.schemas.pattern_tests import PatternTestCase

TESTS_SUFFIX = ".tests.yaml"
_FENCE = "---"


def tests_file(pattern_file: Path) -> Path:
    """`summarize.md` → `summarize.tests.yaml`, beside it."""
    return pattern_file.with_name(pattern_file.name.removesuffix(".md") + TESTS_SUFFIX)


def _compose(text: str, *, source: str, first_line: int) -> tuple[Any, Node | None]:
    """The data and its node tree; a syntax error names the file and the line."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = first_line + (mark.line if mark is not None else 0)
        problem = exc.problem or exc.context or "invalid YAML"
        raise InvalidPatternTests([f"{source}:{line}: YAML syntax error: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise InvalidPatternTests([f"{source}:{first_line}: YAML error: {exc}"]) from None
    finally:
        loader.dispose()
    return data, node


def _line_of(node: Node, loc: Sequence[int | str]) -> int:
    """The 0-based line of the deepest node along `loc` (pydantic's error location)."""
    line = node.start_mark.line
    for part in loc:
        if isinstance(node, MappingNode):
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.value == str(part):
                    node, line = value, key.start_mark.line
                    break
            else:
                break
        elif isinstance(node, SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line
        else:
            break
    return line


def cases_from_data(
    data: Any, node: Node | None, *, source: str, first_line: int = 1
) -> list[PatternTestCase]:
    """Validate a parsed list of cases; every problem is `source:LINE: problem`."""
    return [case for case, _ in _placed_cases(data, node, source=source, first_line=first_line)]


def _placed_cases(
    data: Any, node: Node | None, *, source: str, first_line: int
) -> list[tuple[PatternTestCase, int]]:
    """The cases, each with the file line it starts on."""
    if data is None:
        return []
    if not isinstance(data, list) or node is None:
        raise InvalidPatternTests([f"{source}:{first_line}: the tests must be a list of cases"])
    cases: list[tuple[PatternTestCase, int]] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(data):
        item_node = node.value[index] if isinstance(node, SequenceNode) else node
        where = f"case {index + 1}"
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            where = f"case {item['name']!r}"
        try:
            case = PatternTestCase.model_validate(item)
        except ValidationError as exc:
            for err in exc.errors(include_url=False, include_input=False):
                line = first_line + _line_of(item_node, err["loc"])
                field = ".".join(map(str, err["loc"])) or "case"
                problems.append(f"{source}:{line}: {where}: {field}: {err['msg']}")
            continue
        line = first_line + item_node.start_mark.line
        if case.name in seen:
            problems.append(
                f"{source}:{line}: {where}: the name is already used by the case at line "
                f"{seen[case.name]}"
            )
        seen.setdefault(case.name, line)
        cases.append((case, line))
    if problems:
        raise InvalidPatternTests(problems)
    return cases


def parse_cases(text: str, *, source: str, first_line: int = 1) -> list[PatternTestCase]:
    """Cases from YAML text (a `.tests.yaml` file, or a template version's stored tests):
    `first_line` is the file line the text starts on, so lines point into the whole file."""
    return [case for case, _ in _parse_placed(text, source=source, first_line=first_line)]


def _parse_placed(text: str, *, source: str, first_line: int) -> list[tuple[PatternTestCase, int]]:
    data, node = _compose(text, source=source, first_line=first_line)
    return _placed_cases(data, node, source=source, first_line=first_line)


def _front_matter_cases(pattern_file: Path, text: str) -> list[tuple[PatternTestCase, int]]:
    """The `tests:` key of the front-matter, with lines counted from the file's top."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        return []  # not a pattern the catalog could load either: it reports that
    end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == _FENCE), None)
    if end is None:
        return []
    source = str(pattern_file)
    data, node = _compose("".join(lines[1:end]), source=source, first_line=2)
    if not isinstance(data, dict) or "tests" not in data or not isinstance(node, MappingNode):
        return []
    tests_node = next(
        value for key, value in node.value if isinstance(key, ScalarNode) and key.value == "tests"
    )
    return _placed_cases(data["tests"], tests_node, source=source, first_line=2)


def load_pattern_cases(pattern_file: Path) -> list[PatternTestCase]:
    """Every case of a pattern file: its front-matter's, then its `.tests.yaml` file's.

    Blocking file I/O: call it off the event loop."""
    front = _front_matter_cases(pattern_file, pattern_file.read_text(encoding="utf-8"))
    sibling = tests_file(pattern_file)
    beside: list[tuple[PatternTestCase, int]] = []
    if sibling.is_file():
        beside = _parse_placed(
            sibling.read_text(encoding="utf-8"), source=str(sibling), first_line=1
        )
    lines = {case.name: line for case, line in front}
    problems = [
        f"{sibling}:{line}: case {case.name!r}: the name is already used at "
        f"{pattern_file}:{lines[case.name]}"
        for case, line in beside
        if case.name in lines
    ]
    if problems:
        raise InvalidPatternTests(problems)
    return [case for case, _ in (*front, *beside)]
