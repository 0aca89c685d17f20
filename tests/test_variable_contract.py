"""The one variable contract (`app.catalog.contract`) that pattern files and database templates
share, as properties: problems name exactly the variables on one side only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.catalog.contract import declaration_problems, require_exactly, require_supplied
from app.errors import MissingVariables, VariableContractViolation

names = st.sets(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), max_size=6)


@given(referenced=names, declared=names)
def test_declaration_problems_name_each_one_sided_variable_once(
    referenced: set[str], declared: set[str]
) -> None:
    problems = declaration_problems(referenced, declared)
    undeclared = [f"variable {v!r} is used but not declared" for v in sorted(referenced - declared)]
    unused = [f"variable {v!r} is declared but never used" for v in sorted(declared - referenced)]
    assert problems == undeclared + unused
    assert (problems == []) is (referenced == declared)


@given(referenced=names, supplied=names)
def test_require_supplied_names_every_missing_variable_and_ignores_extras(
    referenced: set[str], supplied: set[str]
) -> None:
    if referenced <= supplied:
        require_supplied("p", referenced, supplied)
        return
    with pytest.raises(MissingVariables) as caught:
        require_supplied("p", referenced, supplied)
    assert caught.value.missing == sorted(referenced - supplied)


@given(declared=names, supplied=names)
def test_require_exactly_refuses_any_difference(declared: set[str], supplied: set[str]) -> None:
    if declared == supplied:
        require_exactly("t", declared, supplied)
        return
    with pytest.raises(VariableContractViolation) as caught:
        require_exactly("t", declared, supplied)
    assert caught.value.missing == sorted(declared - supplied)
    assert caught.value.unexpected == sorted(supplied - declared)
