"""A pattern file: YAML front-matter, then a Jinja2 body that renders into the system prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from jinja2 import Template
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from app.catalog.engine import compile_template
from app.errors import InvalidPattern
from app.schemas import ModelParams
from app.tracking import pattern_content_hash

_FENCE = "---"


class PatternMeta(BaseModel):
    """The front-matter; unknown keys are an error so typos never pass silently."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    description: str = Field(min_length=1)
    model_hint: str | None = Field(
        default=None, validation_alias=AliasChoices("model_hint", "default_model")
    )
    defaults: dict[str, Any] = Field(default_factory=dict)
    variables: dict[str, str] | None = Field(
        default=None, description="Optional documentation of each variable the body uses."
    )
    params: ModelParams = Field(default_factory=ModelParams)
    tags: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Pattern:
    """One loaded pattern: its bytes' hash, metadata and compiled body."""

    name: str
    base_path: str
    content_hash: str
    meta: PatternMeta
    template: Template
    referenced: frozenset[str]

    @property
    def required_variables(self) -> list[str]:
        return sorted(self.referenced - self.meta.defaults.keys())


@dataclass(frozen=True, slots=True)
class RenderedPattern:
    """The output of `apply_template`: the system text and the variables that produced it."""

    pattern: Pattern
    system: str
    variables: dict[str, Any]


def split_front_matter(name: str, text: str) -> tuple[dict[str, Any], str]:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        raise InvalidPattern(name, ["the file must start with a '---' front-matter block"])
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == _FENCE:
            header, body = "".join(lines[1:index]), "".join(lines[index + 1 :])
            break
    else:
        raise InvalidPattern(name, ["the front-matter block is not closed with '---'"])
    try:
        data = yaml.safe_load(header) or {}
    except yaml.YAMLError as exc:
        raise InvalidPattern(name, [f"front-matter is not valid YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise InvalidPattern(name, ["front-matter must be a YAML mapping"])
    return data, body


def parse_pattern(name: str, base_path: str, raw: bytes) -> Pattern:
    """Validate a pattern file completely, so a broken one fails at load, not mid-request."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidPattern(name, ["the file is not UTF-8"]) from None
    data, body = split_front_matter(name, text)
    try:
        pattern_meta = PatternMeta.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"front-matter {'.'.join(map(str, err['loc'])) or 'block'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise InvalidPattern(name, problems) from None
    template, referenced = compile_template(name, body)
    if pattern_meta.variables is not None:
        declared = set(pattern_meta.variables)
        problems = [
            f"variable {v!r} is used but not declared" for v in sorted(referenced - declared)
        ]
        problems += [
            f"variable {v!r} is declared but never used" for v in sorted(declared - referenced)
        ]
        if problems:
            raise InvalidPattern(name, problems)
    return Pattern(
        name=name,
        base_path=base_path,
        content_hash=pattern_content_hash(raw),
        meta=pattern_meta,
        template=template,
        referenced=referenced,
    )
