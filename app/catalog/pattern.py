"""A pattern file: YAML front-matter, then a Jinja2 body.

A body without role markers renders into the system prompt. A chat pattern splits its body with
marker lines `=== system ===`, `=== user ===`, `=== assistant ===` into messages (few-shot
examples); text before the first marker is the system part. Each section is its own template,
so a variable's value can never forge a role marker.

Reading a file (`read_pattern`) checks everything but the Jinja body and costs no compile;
`compile_pattern` compiles the sections and checks the variable contract. The library calls
the second on a pattern's first render, so start-up and listing cost one read per file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from jinja2 import Template
from jsonschema import Draft202012Validator, SchemaError
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from app.catalog.contract import declaration_problems, require_supplied
from app.catalog.engine import apply_template, compile_section
from app.errors import InvalidPattern, RenderLimitExceeded, RenderTimeout
from app.routing.capabilities import Requirement
from app.schemas import Message, ModelParams, Tool, ToolChoice, ToolSet, is_snippet_label
from app.tracking import pattern_content_hash

_FENCE = "---"
_MARKER = re.compile(r"^===\s*(system|user|assistant)\s*===\s*$", re.MULTILINE)
USER_PROMPT_VARIABLE = "user_prompt"

Role = Literal["system", "user", "assistant"]
ReadSibling = Callable[[str], bytes]


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
    fallbacks: list[str] = Field(
        default_factory=list,
        description="provider/model list tried in order when the chosen model fails for a reason "
        "worth trying elsewhere (timeouts, 429, 5xx); over the config file's chains.",
    )
    output_schema: dict[str, Any] | str | None = Field(
        default=None, description="Inline JSON Schema, or a .json file next to the pattern."
    )
    requires: list[Requirement] = Field(
        default_factory=list, description="Capabilities the chosen model must have."
    )
    snippets: list[str] = Field(
        default_factory=list, description="Snippet labels the pattern expects, e.g. PERSONA."
    )
    user_template: bool = Field(
        default=False,
        description="Render the last `=== user ===` block as the user message, with the "
        "request's text available as {{ user_prompt }}.",
    )
    cache: bool = Field(
        default=False,
        description="Answer repeats of an identical request from the response cache; a "
        "request's own `cache` flag overrides this.",
    )
    prompt_cache: bool = Field(
        default=True,
        description="Mark the system prompt as a prompt-cache breakpoint for providers that "
        "take one (Anthropic), so repeats read it at the cache rate; false when the system "
        "prompt differs on most requests and each write would cost more than plain input.",
    )
    tools: list[Tool] = Field(
        default_factory=list,
        description="Functions the model may call (name, description, parameters: a JSON "
        "Schema): a `pattern/<name>` agent's tools, versioned and hashed with the pattern.",
    )
    tool_choice: ToolChoice | None = Field(
        default=None, description="auto, none, required, or {type: tool, name: …}."
    )
    parallel_tool_calls: bool | None = None
    tests: list[Any] | None = Field(
        default=None,
        description="Test cases (a list, the shape of app/schemas/pattern_tests.py): read and "
        "checked by `genai patterns test` (app/release/cases.py), not by the catalog.",
    )

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _choice_word(cls, value: Any) -> Any:
        return {"type": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _tool_set(self) -> PatternMeta:
        self.toolset  # noqa: B018  # checks names are unique and the choice names a tool
        return self

    @property
    def named_models(self) -> list[tuple[str, str]]:
        """(field, model) for each model this file names, hint first: what /v1/models, the
        metric vocabulary and `genai patterns check` read."""
        hint = [("model_hint", self.model_hint)] if self.model_hint else []
        return hint + [(f"fallbacks[{i}]", model) for i, model in enumerate(self.fallbacks)]

    @property
    def toolset(self) -> ToolSet | None:
        if not self.tools:
            return None
        return ToolSet(tools=self.tools, choice=self.tool_choice, parallel=self.parallel_tool_calls)


@dataclass(frozen=True, slots=True)
class Section:
    role: Role
    template: Template
    referenced: frozenset[str]
    quick: bool = False  # app.catalog.engine.renders_quickly


@dataclass(frozen=True, slots=True)
class PatternInfo:
    """What a scan knows without compiling the body: enough to list, hash and fingerprint it."""

    name: str
    base_path: str
    content_hash: str
    meta: PatternMeta
    output_schema: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Pattern(PatternInfo):
    """A pattern ready to render: its sections compiled and its variable contract checked."""

    sections: tuple[Section, ...]
    referenced: frozenset[str]

    @property
    def required_variables(self) -> list[str]:
        return sorted(self.referenced - self.meta.defaults.keys())

    @property
    def renders_quickly(self) -> bool:
        """Every section is quick (app.catalog.engine.renders_quickly)."""
        return all(section.quick for section in self.sections)


@dataclass(frozen=True, slots=True)
class PatternSource:
    """A scanned file: its info and the section texts, still to be compiled."""

    info: PatternInfo
    sections: tuple[tuple[Role, str], ...]


@dataclass(frozen=True, slots=True)
class RenderedPattern:
    """The output of `apply_template`: system text, example messages, and the variables used.

    `messages` holds the pattern's own messages; with `user_template` the last one is the
    templated user message, otherwise the caller's text is appended verbatim after them.
    """

    pattern: Pattern
    system: str
    messages: tuple[Message, ...]
    variables: dict[str, Any]


def _load_yaml(text: str) -> Any:
    """libyaml's parser when installed: several times faster, with the same safe constructor."""
    if yaml.__with_libyaml__:
        return yaml.load(text, Loader=yaml.CSafeLoader)
    return yaml.safe_load(text)


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
        data = _load_yaml(header) or {}
    except yaml.YAMLError as exc:
        raise InvalidPattern(name, [f"front-matter is not valid YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise InvalidPattern(name, ["front-matter must be a YAML mapping"])
    return data, body


def _split_sections(name: str, body: str) -> list[tuple[Role, str]]:
    parts = _MARKER.split(body)
    sections: list[tuple[Role, str]] = [("system", parts[0])]
    for role, text in zip(parts[1::2], parts[2::2], strict=True):
        sections.append((role, text.strip("\n")))  # type: ignore[arg-type]
    if len(sections) > 1 and not sections[0][1].strip():
        sections = sections[1:]
    if sum(1 for role, _ in sections if role == "system") > 1 or any(
        role == "system" for role, _ in sections[1:]
    ):
        raise InvalidPattern(name, ["only the first section may be the system part"])
    return sections


def _load_schema(
    name: str, declared: dict[str, Any] | str | None, read_sibling: ReadSibling | None
) -> tuple[dict[str, Any] | None, bytes]:
    """The schema, and the bytes of its file when it lives next to the pattern."""
    if declared is None or isinstance(declared, dict):
        schema, raw = declared, b""
    else:
        if read_sibling is None or not declared.endswith(".json") or "/" in declared:
            raise InvalidPattern(name, ["output_schema must be a mapping or a sibling .json file"])
        try:
            raw = read_sibling(declared)
            schema = json.loads(raw)
        except (OSError, ValueError) as exc:
            raise InvalidPattern(name, [f"output_schema file {declared!r}: {exc}"]) from None
    return schema, raw


def _check_schema(name: str, schema: dict[str, Any] | None) -> None:
    """Checking against the metaschema costs milliseconds: done with the compile, not the scan."""
    if schema is None:
        return
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        problem = f"output_schema is not a valid JSON Schema: {exc.message}"
        raise InvalidPattern(name, [problem]) from None


def read_pattern(
    name: str, base_path: str, raw: bytes, read_sibling: ReadSibling | None = None
) -> PatternSource:
    """What a scan checks: encoding, front-matter, markers, the schema file's JSON; the hash."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidPattern(name, ["the file is not UTF-8"]) from None
    data, body = split_front_matter(name, text)
    try:
        meta = PatternMeta.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"front-matter {'.'.join(map(str, err['loc'])) or 'block'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise InvalidPattern(name, problems) from None
    sections = _split_sections(name, body)
    problems = [
        f"snippet label {label!r} must be UPPER_CASE"
        for label in meta.snippets
        if not is_snippet_label(label)
    ]
    last_role = sections[-1][0]
    if meta.user_template and last_role != "user":
        problems.append("user_template needs the body to end with a '=== user ===' section")
    if not meta.user_template and len(sections) > 1 and last_role == "user":
        problems.append("the last section is a user block: set user_template: true to use it")
    if problems:
        raise InvalidPattern(name, problems)
    schema, schema_bytes = _load_schema(name, meta.output_schema, read_sibling)
    # A schema kept in its own file is part of what the pattern sends: hash it too.
    content_hash = pattern_content_hash(raw + b"\0" + schema_bytes if schema_bytes else raw)
    info = PatternInfo(name, base_path, content_hash, meta, schema)
    return PatternSource(info=info, sections=tuple(sections))


def compile_pattern(source: PatternSource) -> Pattern:
    """Compile every section, check the variable contract and the output schema.

    RenderTimeout passes through: a compile that ran out of its render budget says nothing
    about the file, so it must not be remembered as a broken pattern.
    """
    info = source.info
    _check_schema(info.name, info.output_schema)
    sections = []
    for role, text in source.sections:
        try:
            compiled = compile_section(info.name, text)
        except RenderTimeout:
            raise
        except RenderLimitExceeded as exc:  # nesting too deep to compile: a broken file
            raise InvalidPattern(info.name, [exc.message]) from None
        sections.append(Section(role, compiled.template, compiled.referenced, compiled.quick))
    referenced = frozenset().union(*(s.referenced for s in sections))
    if info.meta.user_template:
        referenced -= {USER_PROMPT_VARIABLE}
    if info.meta.variables is not None:
        problems = declaration_problems(referenced, info.meta.variables)
        if problems:
            raise InvalidPattern(info.name, problems)
    return Pattern(
        name=info.name,
        base_path=info.base_path,
        content_hash=info.content_hash,
        meta=info.meta,
        output_schema=info.output_schema,
        sections=tuple(sections),
        referenced=referenced,
    )


def parse_pattern(
    name: str, base_path: str, raw: bytes, read_sibling: ReadSibling | None = None
) -> Pattern:
    """Validate a pattern file completely: the scan's checks, then the compile's."""
    return compile_pattern(read_pattern(name, base_path, raw, read_sibling))


def render_pattern(
    pattern: Pattern, variables: Mapping[str, Any], user_prompt: str
) -> tuple[str, tuple[Message, ...]]:
    """Render every section strictly; all missing variables are named at once."""
    require_supplied(pattern.name, pattern.referenced, variables.keys())
    scope = dict(variables)
    if pattern.meta.user_template:
        scope[USER_PROMPT_VARIABLE] = user_prompt
    rendered = [
        (s.role, apply_template(pattern.name, s.template, s.referenced, scope))
        for s in pattern.sections
    ]
    system = rendered[0][1] if rendered[0][0] == "system" else ""
    messages = tuple(
        Message(role=role, content=text) for role, text in rendered if role != "system"
    )
    return system, messages
