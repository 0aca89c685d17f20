"""The strict variable contract of database templates, as a property: a render succeeds exactly
when the supplied keys equal the declared ones, and a refusal names every offending key."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.catalog.templates import render_template_version
from app.errors import VariableContractViolation
from app.schemas import TemplateVersion
from app.tracking import template_checksum

# Jinja keywords and globals are not variable names.
RESERVED = {
    "and",
    "or",
    "not",
    "in",
    "is",
    "if",
    "else",
    "true",
    "false",
    "none",
    "range",
    "dict",
    "lipsum",
    "cycler",
    "joiner",
    "namespace",
    "loop",
    "self",
    "super",
}
names = st.sets(
    st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda n: n not in RESERVED),
    max_size=5,
)


def version_declaring(declared: set[str]) -> TemplateVersion:
    text = " ".join(f"{{{{ {name} }}}}" for name in sorted(declared)) or "static"
    now = dt.datetime.now(dt.UTC)
    return TemplateVersion(
        id=1,
        name="t",
        role="r",
        version=1,
        template=text,
        variables=sorted(declared),
        active=True,
        checksum=template_checksum(text),
        blueprint_schema=None,
        blueprint_instructions=None,
        created_at=now,
        updated_at=now,
    )


@given(declared=names, supplied=names)
def test_render_succeeds_exactly_when_supplied_equals_declared(
    declared: set[str], supplied: set[str]
) -> None:
    version = version_declaring(declared)
    variables = {name: f"<{name}>" for name in supplied}
    if supplied == declared:
        rendered = render_template_version(version, variables)
        assert all(f"<{name}>" in rendered for name in declared)
        return
    with pytest.raises(VariableContractViolation) as caught:
        render_template_version(version, variables)
    assert caught.value.missing == sorted(declared - supplied)
    assert caught.value.unexpected == sorted(supplied - declared)
